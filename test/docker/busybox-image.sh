#!/usr/bin/env bash
# Imports a small image made of Debian's static busybox (a link per applet,
# /tmp) into the local Docker engine, for examples and benchmarks on machines
# that reach no registry. Usage: test/docker/busybox-image.sh [IMAGE]
# (default restart-supervisor-demo/busybox:latest). Needs busybox-static.
set -euo pipefail
image=${1:-restart-supervisor-demo/busybox:latest}
[ -x /bin/busybox ] || { echo "busybox-image: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/data"
install -d -m 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/tmp:/bin/sh\n' > "$root/etc/passwd"
tar -C "$root" -c . | docker import --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
echo "$image"
