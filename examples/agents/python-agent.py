#!/usr/bin/env python3
"""python-agent.py <thread-id> <role>: a uwf agent in Python.

uwf runs it as `python3 python-agent.py <thread-id> <role>`. It answers the
roles of examples/solve-issue.yaml from a table; replace work() with real
work (an LLM call with ctx["prompt"], a tool, a person ...).
"""
import json
import subprocess
import sys


def uwf(*args, stdin=None):
    """Runs `uwf` (first on PATH when uwf runs the agent); returns stdout."""
    done = subprocess.run(["uwf", *args], input=stdin, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(done.returncode)  # uwf explained why on stderr
    return done.stdout


def work(ctx):
    """The role's answer: a dict (the output) or frontmatter markdown text."""
    if ctx["role"] == "planner":
        return {"plan": "Fix: " + ctx["task"], "steps": ["reproduce", "fix", "test"]}
    if ctx["role"] == "developer":
        return {"filesChanged": ["src/auth.rs"], "summary": "Done: " + ctx["task"]}
    if ctx["role"] == "reviewer":
        return f"---\napproved: true\ncomments: LGTM\n---\n\nSaw {ctx['stepCount']} steps.\n"
    sys.exit("python-agent: no answer for role " + ctx["role"])


thread, role = sys.argv[1:3]
ctx = json.loads(uwf("agent", "context", thread, role))
answer = work(ctx)
if isinstance(answer, dict):
    step = uwf("agent", "submit", thread, role, "--output", json.dumps(answer))
else:
    step = uwf("agent", "submit", thread, role, "--text", "-", stdin=answer)
print(step.strip())  # the StepNode's hash: the agent's answer to uwf
