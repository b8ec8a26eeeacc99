// Command restart-probe runs one check of a probe for the supervisor: the
// checks that need the network, which the supervisor (PID 1 of every
// wrapped container) does not link.
//
//	restart-probe check [--name NAME] PROBE-JSON
//	restart-probe ready
//	restart-probe started
//	restart-probe prestop [--sleep SECONDS | --http PROBE-JSON | -- COMMAND [ARG...]]
//
// PROBE-JSON is a rules.Probe (the core/v1 Probe fields, ports as
// numbers). `ready` is the kubelet's readiness exec probe of a wrapped
// container (probe.Ready): the container's state directory, name and
// original readiness check come from the container's environment, which
// the kubelet's exec probe runs in. `started` is the kubelet's startup
// exec probe of a container whose startup probe the supervisor runs
// (probe.Started). `prestop` is the preStop hook of every wrapped
// container: it tells the supervisor that the kubelet is stopping the
// container (probe.Prestop), then runs the container's own hook: its
// command (exec'd, so its output and status are the hook's), its sleep,
// or its httpGet (PROBE-JSON holds it as a probe's httpGet). Exit status: 0 when the check
// succeeds; 1 when it fails, with one line on standard error (the
// kubelet's probe event shows it); 2 for a usage error; 3 when `check`
// errored in a way the kubelet discards rather than counts (an httpGet
// body that cannot be read: probe.ErroredError).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/probe"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

const (
	exitUsage = 2
	// maxProbeArg bounds the probe document: a real one is a few hundred
	// bytes, the supervisor's whole config at most rules.MaxConfigSize.
	maxProbeArg = rules.MaxConfigSize
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "ready" {
		return ready(stderr)
	}
	if len(args) == 1 && args[0] == "started" {
		if err := probe.Started(os.Getenv(contract.EnvStateDir), os.Getenv(contract.EnvContainerName)); err != nil {
			fmt.Fprintf(stderr, "restart-probe: startup: %v\n", err)
			return contract.ProbeExitFailed
		}
		return 0
	}
	if len(args) > 0 && args[0] == "prestop" {
		return prestop(args[1:], stderr)
	}
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: restart-probe check [--name NAME] PROBE-JSON | restart-probe ready | restart-probe started | restart-probe prestop [--sleep SECONDS | --http PROBE-JSON | -- COMMAND [ARG...]]")
		return exitUsage
	}
	fs := flag.NewFlagSet("restart-probe check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "the", "which probe this is, for the failure line")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: restart-probe check [--name NAME] PROBE-JSON")
		return exitUsage
	}
	p, err := parseProbe(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "restart-probe: %v\n", err)
		return exitUsage
	}
	if err := probe.Check(context.Background(), p, os.Environ()); err != nil {
		var errored *probe.ErroredError
		if errors.As(err, &errored) {
			fmt.Fprintf(stderr, "restart-probe: %s probe errored, result discarded: %v\n", *name, err)
			return contract.ProbeExitErrored
		}
		fmt.Fprintf(stderr, "restart-probe: %s probe failed: %v\n", *name, err)
		return contract.ProbeExitFailed
	}
	return 0
}

func ready(stderr io.Writer) int {
	var readiness *rules.Probe
	if doc, ok := os.LookupEnv(contract.EnvConfig); ok {
		cfg, err := rules.Parse([]byte(doc))
		if err != nil {
			fmt.Fprintf(stderr, "restart-probe: %s: %v\n", contract.EnvConfig, err)
			return contract.ProbeExitFailed
		}
		if cfg.Probes != nil {
			readiness = cfg.Probes.Readiness
		}
	}
	err := probe.Ready(context.Background(), os.Getenv(contract.EnvStateDir), os.Getenv(contract.EnvContainerName), readiness, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "restart-probe: readiness: %v\n", err)
		return contract.ProbeExitFailed
	}
	return 0
}

// prestop runs the preStop hook of a wrapped container: the supervisor is
// told first (a failure to tell it is reported and the hook runs all the
// same: the stop signal that follows still stops the container), then the
// container's own hook, unless no workload runs.
func prestop(args []string, stderr io.Writer) int {
	const usage = "usage: restart-probe prestop [--sleep SECONDS | --http PROBE-JSON | -- COMMAND [ARG...]]"
	var sleep time.Duration
	var get *rules.Probe
	var command []string
	switch {
	case len(args) == 0:
	case args[0] == "--" && len(args) > 1:
		command = args[1:]
	case args[0] == "--sleep" && len(args) == 2:
		n, err := strconv.ParseInt(args[1], 10, 64)
		// The API server's bound on a sleep action is the grace period,
		// itself at most what an int64 of seconds holds; a day more than
		// any real one.
		if err != nil || n < 0 || n > 1<<31 {
			fmt.Fprintf(stderr, "restart-probe: prestop --sleep: %q is not a number of seconds\n", clipArg(args[1]))
			return exitUsage
		}
		sleep = time.Duration(n) * time.Second
	case args[0] == "--http" && len(args) == 2:
		p, err := parseProbe(args[1])
		if err == nil && p.HTTPGet == nil {
			err = errors.New("probe: no httpGet")
		}
		if err != nil {
			fmt.Fprintf(stderr, "restart-probe: prestop --http: %v\n", err)
			return exitUsage
		}
		get = p
	default:
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	err := probe.Prestop(os.Getenv(contract.EnvStateDir), os.Getenv(contract.EnvContainerName), probe.PrestopAckWait)
	if errors.Is(err, probe.ErrNoWorkload) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "restart-probe: prestop: cannot tell the supervisor that the container is stopping (a workload that exits before the stop signal may be restarted): %v\n", err)
	}
	switch {
	case command != nil:
		path, err := exec.LookPath(command[0])
		if err == nil {
			err = syscall.Exec(path, command, os.Environ())
		}
		fmt.Fprintf(stderr, "restart-probe: prestop: %s: %v\n", clipArg(command[0]), err)
		return contract.ProbeExitFailed
	case sleep > 0:
		time.Sleep(sleep)
	case get != nil:
		if err := probe.LifecycleGet(context.Background(), get.HTTPGet); err != nil {
			fmt.Fprintf(stderr, "restart-probe: prestop: %v\n", err)
			return contract.ProbeExitFailed
		}
	}
	return 0
}

func clipArg(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

// parseProbe reads and validates one probe document.
func parseProbe(doc string) (*rules.Probe, error) {
	if len(doc) > maxProbeArg {
		return nil, fmt.Errorf("probe: %d bytes: larger than %d bytes", len(doc), maxProbeArg)
	}
	var p rules.Probe
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return nil, fmt.Errorf("probe: invalid JSON: %v", err)
	}
	if err := rules.ValidateProbe(&p, "probe", false); err != nil {
		return nil, err
	}
	return &p, nil
}
