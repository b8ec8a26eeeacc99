package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/restart-supervisor/restart-supervisor/dockerrun"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func init() {
	register("docker-args", "print the docker run arguments that run an image under restart-supervisor",
		func(ctx context.Context, args []string) int {
			return dockerArgs(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		})
}

const dockerArgsUsage = `usage: restart-injector docker-args IMAGE [flags] [-- ARGS...]

Prints, as one shell-quoted line, the arguments that follow 'docker run' to run
IMAGE under restart-supervisor without rebuilding it: the supervisor binary
mounted read-only at ` + dockerrun.MountDir + `, set as the entrypoint, the rules
in ` + dockerrun.ConfigEnv + ` and the image's own ENTRYPOINT and CMD after '--'.
The image config comes from the local engine ('docker image inspect') or, when
the engine does not have the image, from its registry (credentials from
'docker login'). ARGS after '--' replace the image's CMD, as they
would after 'docker run IMAGE'.

Docker itself restarts nothing (--restart no), which is a pod restartPolicy of
Never: when the rules file does not set podRestartPolicy, docker-args sets it
to Never, so the container exits whenever the rules do not restart in place.

  eval "docker run --rm $(restart-injector docker-args IMAGE --rules rules.yaml)"

flags:
`

func dockerArgs(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("docker-args", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rulesFile := fs.String("rules", "", "restart rules `FILE` (YAML or JSON, the supervisor's config document; - for stdin)")
	supervisor := fs.String("supervisor", "", "host `PATH` of a static restart-supervisor binary to bind-mount (default: restart-supervisor from PATH)")
	volume := fs.String("volume", "", "mount the named `VOLUME` filled by 'restart-supervisor install' instead of a host binary")
	dockerCLI := fs.String("docker", "docker", "docker CLI `COMMAND` used to read the image config")
	format := fs.String("format", "shell", "output `FORMAT`: shell (one quoted line) or json (an array of arguments)")
	logFormat := fs.String("log-format", "", "pass --log-format `text|json` to the supervisor")
	source := fs.String("source", "auto", "`WHERE` to read the image config: auto (local engine, then registry), local or registry")
	platform := fs.String("platform", "", "`os/arch[/variant]` to take from a multi-platform image in a registry (default: this machine's, "+runtime.GOOS+"/"+runtime.GOARCH+")")
	timeout := fs.Duration("timeout", 30*time.Second, "registry lookup timeout")
	grace := fs.Duration("grace-period", 0, "pass --grace-period `DURATION` to the supervisor; keep it below docker stop's timeout (10s unless -t or --stop-timeout says otherwise) so the supervisor, not Docker, kills a workload that ignores SIGTERM")
	fs.Usage = func() {
		fmt.Fprint(stderr, dockerArgsUsage)
		fs.PrintDefaults()
	}

	// Flags may come before or after IMAGE; everything after '--' is ARGS.
	var rest []string
	hasArgs := false
	for i, a := range args {
		if a == "--" {
			rest, hasArgs = args[i+1:], true
			args = args[:i]
			break
		}
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "restart-injector docker-args: want exactly one IMAGE, got %d arguments (put the container's arguments after --)\n", len(positional))
		return exitUsage
	}
	if *format != "shell" && *format != "json" {
		fmt.Fprintf(stderr, "restart-injector docker-args: --format: unsupported value %q: supported values: \"shell\", \"json\"\n", *format)
		return exitUsage
	}
	if *source != "auto" && *source != "local" && *source != "registry" {
		fmt.Fprintf(stderr, "restart-injector docker-args: --source: unsupported value %q: supported values: \"auto\", \"local\", \"registry\"\n", *source)
		return exitUsage
	}
	if *logFormat != "" && *logFormat != "text" && *logFormat != "json" {
		fmt.Fprintf(stderr, "restart-injector docker-args: --log-format: unsupported value %q: supported values: \"text\", \"json\"\n", *logFormat)
		return exitUsage
	}
	image := positional[0]
	fail := func(err error) int {
		fmt.Fprintf(stderr, "restart-injector docker-args: %v\n", err)
		return exitFailure
	}

	opts := dockerrun.Options{Image: image, Args: rest, HasArgs: hasArgs, Volume: *volume}
	if *logFormat != "" {
		opts.SupervisorFlags = append(opts.SupervisorFlags, "--log-format", *logFormat)
	}
	if *grace < 0 {
		fmt.Fprintf(stderr, "restart-injector docker-args: --grace-period: must not be negative\n")
		return exitUsage
	}
	if *grace > 0 {
		opts.SupervisorFlags = append(opts.SupervisorFlags, "--grace-period", grace.String())
	}
	if *rulesFile != "" {
		doc, err := readRules(*rulesFile, stdin)
		if err != nil {
			return fail(err)
		}
		opts.RulesJSON = doc
	}
	if *volume == "" {
		path, err := supervisorBinary(*supervisor, stderr)
		if err != nil {
			return fail(err)
		}
		opts.Supervisor = path
	} else if *supervisor != "" {
		fmt.Fprintln(stderr, "restart-injector docker-args: --supervisor and --volume: give only one of them")
		return exitUsage
	}

	cfg, err := imageConfig(ctx, image, *source, *dockerCLI, *platform, *timeout)
	if err != nil {
		return fail(err)
	}
	opts.Config = cfg
	argv, err := dockerrun.Args(opts)
	if err != nil {
		return fail(err)
	}
	if *format == "json" {
		b, _ := json.Marshal(argv)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, dockerrun.ShellQuote(argv))
	}
	return exitOK
}

// readRules parses and validates the rules document the same way the
// supervisor will, so a mistake is reported here, naming the field, and not
// when the container starts; it returns the compact JSON form.
func readRules(path string, stdin io.Reader) (string, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("--rules: %v", err)
	}
	cfg, err := rules.Parse(data)
	if err != nil {
		return "", fmt.Errorf("--rules %s: %v", path, err)
	}
	// Docker restarts nothing by itself (docker run --restart no), which is
	// a pod restartPolicy of Never. Left at the Kubernetes default (Always),
	// a container policy of Never would make the supervisor hold the
	// container idle, waiting for a kubelet restart that never comes.
	if cfg.PodRestartPolicy == "" {
		cfg.PodRestartPolicy = rules.Never
	}
	doc, err := cfg.Marshal()
	if err != nil {
		return "", fmt.Errorf("--rules %s: %v", path, err)
	}
	return string(doc), nil
}

// supervisorBinary resolves the host binary to bind-mount. It must be an
// absolute path for `docker run -v`, and statically linked, or it will not
// start in an image that lacks its C library.
func supervisorBinary(path string, stderr io.Writer) (string, error) {
	if path == "" {
		found, err := exec.LookPath("restart-supervisor")
		if err != nil {
			return "", errors.New("--supervisor: restart-supervisor is not in PATH; give --supervisor PATH or --volume NAME")
		}
		path = found
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("--supervisor %s: %v", path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--supervisor %s: %v", path, errors.Unwrap(err))
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("--supervisor %s: not an executable file", path)
	}
	if f, err := elf.Open(abs); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				fmt.Fprintf(stderr, "restart-injector docker-args: warning: %s is dynamically linked; build it with CGO_ENABLED=0 or it will not start in images without its C library\n", path)
				break
			}
		}
		f.Close()
	}
	return abs, nil
}

// imageConfig reads the image's ENTRYPOINT and CMD from the local engine
// (what `docker run` will use when the image is there) or, when the engine
// does not have it, from the registry `docker run` would pull it from.
func imageConfig(ctx context.Context, image, source, dockerCLI, platform string, timeout time.Duration) (dockerrun.ImageConfig, error) {
	if source != "registry" {
		cfg, err := dockerrun.InspectLocal(ctx, dockerCLI, image)
		if err == nil || source == "local" {
			if errors.Is(err, dockerrun.ErrNoSuchImage) {
				return cfg, fmt.Errorf("image %s: not in the local engine; pull or build it first, or use --source registry", image)
			}
			return cfg, err
		}
		// Only an image the engine lacks, or no docker CLI at all, sends the
		// lookup to the registry; an engine that cannot be asked is an error
		// rather than a silent read of a maybe different registry image.
		if !errors.Is(err, dockerrun.ErrNoSuchImage) && !errors.Is(err, exec.ErrNotFound) {
			return cfg, fmt.Errorf("%v (use --source registry to read the image config from its registry)", err)
		}
	}
	res, err := injector.NewResolver(injector.ResolverOptions{Keychain: authn.DefaultKeychain, Timeout: timeout}).Resolve(ctx, image, "", nil)
	if err != nil {
		where := "registry"
		if source == "auto" {
			where = "not in the local engine, and its registry"
		}
		return dockerrun.ImageConfig{}, fmt.Errorf("image %s: %s: %v", image, where, err)
	}
	return pickPlatform(image, res, platform)
}

// pickPlatform takes the configuration of one platform of a registry image,
// as `docker run --platform` would: the exact key, then the key without its
// variant.
func pickPlatform(image string, res *injector.ResolvedImage, platform string) (dockerrun.ImageConfig, error) {
	if platform == "" {
		platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	want := []string{platform}
	if parts := strings.Split(platform, "/"); len(parts) == 3 {
		want = append(want, parts[0]+"/"+parts[1])
	}
	for _, k := range want {
		if c, ok := res.Platforms[k]; ok {
			return dockerrun.ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Platform: k}, nil
		}
	}
	// A platform asked for without variant matches a single variant of it.
	var match []string
	for k := range res.Platforms {
		if strings.HasPrefix(k, platform+"/") {
			match = append(match, k)
		}
	}
	if len(match) == 1 {
		c := res.Platforms[match[0]]
		return dockerrun.ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Platform: match[0]}, nil
	}
	keys := make([]string, 0, len(res.Platforms))
	for k := range res.Platforms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return dockerrun.ImageConfig{}, fmt.Errorf("image %s: no %s image in the registry; available platforms: %s (choose one with --platform)",
		image, platform, strings.Join(keys, ", "))
}
