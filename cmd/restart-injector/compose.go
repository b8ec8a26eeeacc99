package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/restart-supervisor/restart-supervisor/compose"
	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/dockerrun"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

const composeUsage = `usage: restart-injector compose -f FILE [-o FILE] [flags]

Rewrites a Docker Compose file whose services carry restart rules in an
'` + compose.RulesKey + `' extension (the supervisor's config document:
restartPolicy, restartPolicyRules, backoff) so that they run under
restart-supervisor: a one-shot service '` + contract.InstallContainer + `' installs the
binary into the volume '` + contract.BinVolume + `', and each ruled service gets
the supervisor as entrypoint, its own command after '--', the rules in the
environment and the shared state volume '` + contract.StateVolume + `'. When a
rule uses RestartAllContainers, every service is wrapped and takes part in
pod restarts. Compose's restart: becomes the rules' podRestartPolicy (no:
Never, on-failure: OnFailure, always and unless-stopped: Always).

Services without entrypoint, or without stop_signal, are looked up in the
local engine ('docker image inspect'); an image the engine lacks is an error
naming the service when its command is needed (pull or build it first).

  restart-injector compose -f docker-compose.yaml -o docker-compose.supervised.yaml
  docker-compose -f docker-compose.supervised.yaml up
`

func runCompose(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("compose")
	in := fs.StringP("filename", "f", "", "Compose `FILE` to read (- for stdin)")
	var outFlag outputFile
	fs.VarP(&outFlag, "output", "o", "`FILE` to write (default stdout); not a format")
	out := (*string)(&outFlag)
	image := fs.String("supervisor-image", injector.DefaultSupervisorImage(), "`IMAGE` of the install service")
	dockerCLI := fs.String("docker", "docker", "docker CLI `COMMAND` used to read image configs from the local engine")
	if code, ok := parseFlags(fs, "compose", args, composeUsage, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "restart-injector compose: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *in == "" {
		fmt.Fprintln(stderr, "restart-injector compose: -f FILE is required")
		return exitUsage
	}
	data, err := readCapped(*in, stdin, compose.MaxInputSize)
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector compose: %s: %v\n", *in, err)
		return exitFailure
	}
	result, err := compose.Generate(ctx, data, compose.Options{
		SupervisorImage: *image,
		Inspect: func(ctx context.Context, image string) (dockerrun.ImageConfig, error) {
			return dockerrun.InspectLocal(ctx, *dockerCLI, image)
		},
		Warn: func(msg string) { fmt.Fprintln(stderr, "restart-injector compose: warning:", msg) },
	})
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector compose: %s: %v\n", *in, err)
		return exitFailure
	}
	if *out == "" {
		if _, err := stdout.Write(result); err != nil {
			fmt.Fprintf(stderr, "restart-injector compose: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	if err := os.WriteFile(*out, result, 0o644); err != nil {
		fmt.Fprintf(stderr, "restart-injector compose: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// readCapped reads path ("-": stdin) and refuses more than limit bytes
// without reading them all.
func readCapped(path string, stdin io.Reader, limit int64) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, errors.Unwrap(err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
			return nil, errors.New("not a regular file")
		}
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
