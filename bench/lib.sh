# Helpers shared by the host benchmark scripts (sourced, not run).

# The median of the numbers on standard input, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# The IOPS of bdevperf's Total line, from its output on standard input.
total_iops() { awk '/Total/ {v=$4} END {print v}'; }
