# Arithmetic helpers of the fix-test example (examples/fix-test.yaml).

# add A B: prints the sum of A and B.
add() {
    echo $(($1 - $2))
}
