#!/usr/bin/env bash
# asyncai-watch from the shell: list what a server offers, watch a file, print each notice as JSON.
#
#   bash examples/cli_watch.sh
#
# Needs asyncai-watch and asyncai-mcp-files on PATH (pip install asyncai-watch). The watch runs as a
# coprocess; the script reads its output as it comes (no sleeps), changes the file, and stops it.
set -euo pipefail

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo '{"mode": "off"}' > "$dir/config.json"

asyncai-watch resources --server "files=asyncai-mcp-files $dir"

coproc WATCH {
    exec asyncai-watch watch "file://$dir/config.json" --server "files=asyncai-mcp-files $dir" \
        --debounce 0 --json 2>&1
}
watch_pid=$WATCH_PID              # bash forgets WATCH_PID once the coprocess ends
exec {out}<&"${WATCH[0]}"
read -r started <&"$out"          # "asyncai-watch: watching file://... (state); Ctrl-C stops"
echo "$started"

# Write the new content whole (rename), as editors do.
echo '{"mode": "on"}' > "$dir/config.json.new"
mv "$dir/config.json.new" "$dir/config.json"

read -r notice <&"$out"           # one JSON object per notice, e.g. for jq
echo "$notice"

kill -TERM "$watch_pid"
wait "$watch_pid"                 # exits 0 on SIGTERM or Ctrl-C
