#!/bin/sh
# rep.sh N [runs]: per-op cpu tree cost over several processes (min and median of medians)
N=${1:-128}; R=${2:-7}
for i in $(seq $R); do GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu build/gtlua .probe/cpuop.lua $N tree; done | awk '{print $(NF-1)}' | sort -n | awk '{a[NR]=$1} END {printf "ns/op min %.1f med %.1f max %.1f\n", a[1], a[int((NR+1)/2)], a[NR]}'
