#!/bin/sh
# The repository's tests: `sh test.sh` exits 0 when they all pass.
. ./lib.sh

check() { # check NAME ACTUAL EXPECTED
    if [ "$2" = "$3" ]; then
        echo "ok: $1"
    else
        echo "FAIL: $1: got $2, expected $3"
        failed=1
    fi
}

failed=0
check "add 2 3" "$(add 2 3)" 5
check "add 0 0" "$(add 0 0)" 0
exit $failed
