#!/usr/bin/env bash
# asyncai-watch from the shell: list what a server offers, watch a file, print one notice as JSON.
#
#   bash examples/cli_watch.sh
#
# Needs asyncai-watch and asyncai-mcp-files on PATH (pip install asyncai-watch). The watch runs in
# the background with --once: it prints one notice and exits 0, so no coprocess and no kill.
set -euo pipefail

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo '{"mode": "off"}' > "$dir/config.json"

asyncai-watch resources --server "files=asyncai-mcp-files $dir"

# The watch says "asyncai-watch: watching file://... (state); Ctrl-C stops" on stderr once it is
# subscribed; the change is made only then (read from a FIFO: awaited, no sleeps).
mkfifo "$dir/status"
asyncai-watch watch "file://$dir/config.json" --server "files=asyncai-mcp-files $dir" \
    --debounce 0 --json --once 2>"$dir/status" >"$dir/notice" &
watch_pid=$!
exec {status}<"$dir/status"       # held open to the end: the watch's stderr never hits a closed pipe
until read -r line <&"$status" && [[ $line == *watching* ]]; do :; done
echo "$line"

# Write the new content whole (rename), as editors do.
echo '{"mode": "on"}' > "$dir/config.json.new"
mv "$dir/config.json.new" "$dir/config.json"

wait "$watch_pid"                 # --once: exits 0 after the first notice
cat "$dir/notice"                 # one JSON object per notice, e.g. for jq
exec {status}<&-
