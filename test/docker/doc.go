// Package docker holds the end-to-end tests of restart-supervisor under a
// real Docker engine: the bind-mount one-liner printed by
// `restart-injector docker-args`, the supervisor image built from
// Dockerfile.supervisor, the FROM-your-image pattern, restarts in place,
// docker stop/kill, reaping, PID 1 and TTYs.
//
// The tests start the engine themselves through setup.sh when none answers.
// No registry is needed: the test image is a busybox rootfs imported with
// `docker import`, and the supervisor image is the `prebuilt` target of
// Dockerfile.supervisor. Outside CI they skip when no engine can be started;
// with CI=true they fail instead.
package docker
