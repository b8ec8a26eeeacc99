package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/dockerrun"
)

const dockerArgsUsage = `usage: restart-injector docker-args IMAGE [flags] [-- ARGS...]

Prints, as one shell-quoted line, the arguments that follow 'docker run' to run
IMAGE under restart-supervisor without rebuilding it: the supervisor binary
mounted read-only at ` + contract.BinDir + `, set as the entrypoint, the rules
in ` + contract.EnvConfig + ` and the image's own ENTRYPOINT and CMD after '--'.
The image config comes from the local engine ('docker image inspect') or, when
the engine does not have the image, from its registry (credentials from
'docker login'). ARGS after '--' replace the image's CMD, as they
would after 'docker run IMAGE'.

Docker itself restarts nothing (--restart no), which is a pod restartPolicy of
Never: when the rules file does not set podRestartPolicy, docker-args sets it
to Never, so the container exits whenever the rules do not restart in place.

  eval "docker run --rm $(restart-injector docker-args IMAGE --rules rules.yaml)"
`

func dockerArgs(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("docker-args")
	r := dockerrun.Request{Stdin: stdin, Warn: func(msg string) { fmt.Fprintln(stderr, "restart-injector docker-args: warning:", msg) }}
	fs.StringVar(&r.RulesFile, "rules", "", "restart rules `FILE` (YAML or JSON, the supervisor's config document; - for stdin)")
	fs.StringVar(&r.Supervisor, "supervisor", "", "host `PATH` of a static restart-supervisor binary to bind-mount (default: restart-supervisor from PATH)")
	fs.StringVar(&r.Volume, "volume", "", "mount the named `VOLUME` filled by 'restart-supervisor install' instead of a host binary")
	fs.StringVar(&r.DockerCLI, "docker", "docker", "docker CLI `COMMAND` used to read the image config")
	format := fs.String("format", "shell", "output `FORMAT`: shell (one quoted line) or json (an array of arguments)")
	fs.StringVar(&r.LogFormat, "log-format", "", "pass --log-format `text|json` to the supervisor")
	fs.StringVar(&r.Source, "source", "auto", "`WHERE` to read the image config: auto (local engine, then registry), local or registry")
	fs.StringVar(&r.Platform, "platform", "", "`os/arch[/variant]` to take from a multi-platform image in a registry (default: this machine's, "+runtime.GOOS+"/"+runtime.GOARCH+")")
	fs.DurationVar(&r.Timeout, "timeout", 30*time.Second, "registry lookup timeout")
	var insecure registryList
	registryFlags(fs, &insecure, nil)
	fs.DurationVar(&r.GracePeriod, "grace-period", 0, "pass --grace-period `DURATION` to the supervisor; keep it below docker stop's timeout (10s unless -t or --stop-timeout says otherwise) so the supervisor, not Docker, kills a workload that ignores SIGTERM")
	if code, ok := parseFlags(fs, "docker-args", args, dockerArgsUsage, stderr); !ok {
		return code
	}
	images, rest, hasRest := positionalsAndRest(fs)
	r.Args, r.HasArgs = rest, hasRest
	if len(images) != 1 {
		fmt.Fprintf(stderr, "restart-injector docker-args: want exactly one IMAGE, got %d arguments (put the container's arguments after --)\n", len(images))
		return exitUsage
	}
	if *format != "shell" && *format != "json" {
		fmt.Fprintf(stderr, "restart-injector docker-args: --format: unsupported value %q: supported values: \"shell\", \"json\"\n", *format)
		return exitUsage
	}
	r.Image, r.InsecureRegistries = images[0], insecure
	argv, err := dockerrun.Build(ctx, r)
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector docker-args: %v\n", err)
		if _, usage := errors.AsType[*dockerrun.UsageError](err); usage {
			return exitUsage
		}
		return exitFailure
	}
	if *format == "json" {
		b, _ := json.Marshal(argv)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, dockerrun.ShellQuote(argv))
	}
	return exitOK
}
