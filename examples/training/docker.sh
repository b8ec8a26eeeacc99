#!/usr/bin/env bash
# Runs examples/training under restart-supervisor with Docker: two ranks, one
# container each, on the host network (rendezvous on 127.0.0.1), a shared
# checkpoint directory. Rank 1 exits 42 at step 25 (FAULT_KIND=kill: it is
# SIGKILLed); its rule restarts it in place, rank 0's gloo error (exit 1)
# restarts rank 0 in place, and both resume from the step-20 checkpoint.
#
# The image is Debian bookworm with python3-torch, built once without a
# registry (hack/training-rootfs.sh) and imported as
# restart-supervisor-demo/training. Needs a Docker engine
# (test/docker/setup.sh starts one) and root the first time, for the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
image=restart-supervisor-demo/training:bookworm
if ! docker image inspect "$image" >/dev/null 2>&1; then
	rootfs=$("$root/hack/training-rootfs.sh" | tail -1)
	docker import --change 'CMD ["/usr/bin/python3"]' "$rootfs" "$image" >/dev/null
fi
work=$(mktemp -d)
trap 'docker rm -f rs-train-0 rs-train-1 >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
(cd "$root" && make -s build)
cat > "$work/rules.yaml" <<'RULES'
restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes: {operator: In, values: [1, 42, 137]}
RULES
mkdir "$work/ckpt"
port=$((29500 + RANDOM % 400))
for rank in 0 1; do
	args=$("$root/bin/restart-injector" docker-args "$image" --rules "$work/rules.yaml" \
		--supervisor "$root/bin/restart-supervisor" -- /usr/bin/python3 /examples/train.py \
		--steps 40 --ckpt-every 10 --ckpt-dir /ckpt --fault-kind "${FAULT_KIND:-exit}" --fault-step 25)
	eval "docker run -d --name rs-train-$rank --network host -v '$work/ckpt:/ckpt' \
		-v '$root/examples/training:/examples:ro' -e RANK=$rank -e WORLD_SIZE=2 \
		-e MASTER_ADDR=127.0.0.1 -e MASTER_PORT=$port $args" >/dev/null
done
status=0
for rank in 0 1; do
	code=$(docker wait rs-train-$rank)
	echo "== rank $rank exited $code; its log:"
	docker logs rs-train-$rank 2>&1 | grep -E '"event"|restarting in place|restart-supervisor' || true
	[ "$code" = 0 ] || status=1
done
exit "$status"
