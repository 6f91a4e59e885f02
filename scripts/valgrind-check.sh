#!/bin/sh
# Reads the valgrind logs of `make test-valgrind` (one per server) and fails on
# any invalid read/write/free, use of uninitialised memory, or a block
# "definitely lost" with a frame in the module. Prints what it found.
set -eu
dir=${1:?usage: valgrind-check.sh LOGDIR}
set -- "$dir"/redis-*.log
[ -e "$1" ] || { echo "valgrind-check: no logs in $dir" >&2; exit 1; }
awk '
function flush() {
    if (rec == "") return
    if (head ~ /definitely lost in loss record/) {
        definite++
        if (rec ~ /redis_unique/) { bad++; printf "%s (module):\n%s\n", FILENAME_, rec }
    } else if (head ~ /Invalid (read|write|free)|uninitialised|Mismatched free|overlap|fishy value|Syscall param|Jump to the invalid/) {
        bad++; printf "%s:\n%s\n", FILENAME_, rec
    }
    rec = ""; head = ""
}
FNR == 1 { flush(); logs++; FILENAME_ = FILENAME }
/^==[0-9]+== *$/ { flush(); next }
/^==[0-9]+== / {
    line = $0; sub(/^==[0-9]+== /, "", line)
    if (rec == "") head = line
    rec = rec "    " line "\n"
    if (line ~ /^ERROR SUMMARY:/) summaries++
    if (line ~ /^LEAK SUMMARY:|^All heap blocks were freed/) leakchecks++
    if (line ~ /definitely lost: [0-9,]+ bytes/) { v = line; sub(/.*definitely lost: /, "", v); sub(/ bytes.*/, "", v); gsub(/,/, "", v); lost += v }
}
END {
    flush()
    printf "valgrind: %d server logs, %d exited cleanly (%d with a leak check); %d definitely-lost records (%d bytes in all), %d fault(s) in or through the module\n", logs, summaries, leakchecks, definite, lost, bad
    exit bad > 0
}
' "$@"
