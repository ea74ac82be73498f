#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
cat > report.sh <<'SH'
#!/bin/bash
# usage: report.sh ACCESS_LOG   (nginx combined format)
set -eu
export LC_ALL=C
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# one pass: counters, plus tagged "I count ip" / "E count path" lines for the top-3 lists
awk '
  { ip = $1; url = $7; st = $9; size = $10
    total++; ips[ip]++
    if (size != "-") bytes += size
    if (st ~ /^5/) { n5++; sub(/\?.*/, "", url); errs[url]++ } }
  END {
    n = 0; for (k in ips) n++
    printf "S total_requests %d\nS unique_ips %d\nS errors_5xx %d\nS bytes_total %d\n", total, n, n5, bytes
    for (k in ips) print "I", ips[k], k
    for (k in errs) print "E", errs[k], k
  }' "$1" > "$tmp"
top() { grep "^$1 " "$tmp" | cut -d' ' -f2- | sort -k1,1nr -k2,2 | head -n 3 || true; }
stat() { grep "^S $1 " "$tmp" | cut -d' ' -f2-; }
stat total_requests
stat unique_ips
echo top_ips
top I
stat errors_5xx
echo top_error_paths
top E
stat bytes_total
SH
chmod +x report.sh
./report.sh logs/access.log > report.txt
cat report.txt
