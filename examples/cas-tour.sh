#!/usr/bin/env bash
# A guided tour of uwf's content-addressed store, on a throwaway storage root.
# Offline, no configuration needed:  bash examples/cas-tour.sh
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --bin uwf
uwf="$PWD/target/debug/uwf"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
export UNCAGED_WORKFLOW_STORAGE_ROOT="$root"

bold=$'\033[1m' plain=$'\033[0m'
[ -t 1 ] || { bold=''; plain=''; }
say() { printf '\n%s# %s%s\n' "$bold" "$*" "$plain"; }
run() { printf '%s$ uwf %s%s\n' "$bold" "$*" "$plain"; "$uwf" "$@"; }
# Like run, and keeps the first hash of the answer in $hash (no jq needed).
keep() {
  printf '%s$ uwf %s%s\n' "$bold" "$*" "$plain"
  local out
  out=$("$uwf" "$@")
  printf '%s\n' "$out"
  hash=$(printf '%s\n' "$out" | grep -o '"hash": *"[0-9A-Z]\{13\}"' | head -n 1 | grep -o '[0-9A-Z]\{13\}')
}

say "A fresh store already knows the meta-schema and uwf's own node types."
run cas schema list

say "Register a type: a JSON Schema stored as a node. Its hash is the type's name."
keep cas schema put examples/note.schema.json
note=$hash

say "Store two notes; the second links the first through a cas_ref field."
keep cas put "$note" '{"text": "Is the login bug fixed?", "replyTo": null}'
first=$hash
keep cas put "$note" "{\"text\": \"Yes, in the auth middleware.\", \"replyTo\": \"$first\"}"
second=$hash

say "Same content, same hash: storing it again creates nothing."
run cas put "$note" '{"replyTo": null, "text": "Is the login bug fixed?"}'

say "References are found through the schema; walk follows them breadth-first."
run cas refs "$second"
run cas walk "$second"
run --format yaml cas get "$second" --timestamp

say "Invalid data is refused with the failing path, and nothing is stored."
run cas put "$note" '{"text": "", "replyTo": "not-a-hash"}' || true

say "verify re-hashes every node and checks every type and reference."
run cas verify
