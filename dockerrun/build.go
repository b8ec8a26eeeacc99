package dockerrun

import (
	"context"
	"debug/elf"
	"errors"
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

	"github.com/restart-supervisor/restart-supervisor/imagelookup"
	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// A UsageError is a mistake in the Request itself, found by Build before
// anything is read; the command reports it as a usage error.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Request is one `restart-injector docker-args` invocation. Its fields are
// that command's flags, and Build's errors name them by those flags, since
// that command is where they are reported.
type Request struct {
	// Image is the image reference, as given to `docker run`.
	Image string
	// Args, when HasArgs is set, replace the image's CMD. HasArgs
	// without Args runs the ENTRYPOINT alone.
	Args    []string
	HasArgs bool

	// RulesFile is the supervisor's configuration document (YAML or JSON),
	// validated here. "-" reads it from Stdin. Empty leaves
	// RESTART_SUPERVISOR_CONFIG out, so the supervisor runs with its
	// defaults. A document that does not set podRestartPolicy gets Never,
	// since Docker restarts nothing by itself.
	RulesFile string
	// Stdin is read when RulesFile is "-"; nil reads nothing.
	Stdin io.Reader

	// Supervisor is the host path of a static restart-supervisor binary to
	// bind-mount. Empty means restart-supervisor from $PATH, unless Volume
	// is set. Setting both is a usage error.
	Supervisor string
	// Volume is a named volume filled by `restart-supervisor install`,
	// mounted instead of a host binary. Empty means a host binary.
	Volume string

	// Source is where the image config is read: "local" (the engine, via
	// `docker image inspect`), "registry", or "auto" or empty (the engine,
	// then the registry when the engine lacks the image or there is no
	// docker CLI). Anything else is a usage error.
	Source string
	// DockerCLI is the docker command to ask the engine with; empty means
	// "docker".
	DockerCLI string
	// Platform is the os/arch[/variant] taken from a multi-platform image
	// in a registry; empty means this machine's.
	Platform string
	// Timeout bounds the registry lookup; zero means the resolver's
	// default.
	Timeout time.Duration
	// InsecureRegistries (HOST[:PORT]) are the registries looked up over
	// plain HTTP; any other is reached over HTTPS only.
	InsecureRegistries []string

	// LogFormat, when not empty, is passed to the supervisor as
	// --log-format; it must be "text" or "json".
	LogFormat string
	// GracePeriod, when positive, is passed to the supervisor as
	// --grace-period; zero leaves the supervisor's default, negative is a
	// usage error.
	GracePeriod time.Duration

	// Warn is told of problems that do not stop Build, such as a
	// dynamically linked supervisor binary; nil discards them.
	Warn func(msg string)
}

// Build checks r, reads what Args needs (the rules document, the
// supervisor binary, the image config from the engine or the registry) and
// returns the `docker run` arguments. A *UsageError is a mistake in r,
// reported before any of that is read.
func Build(ctx context.Context, r Request) ([]string, error) {
	if err := r.check(); err != nil {
		return nil, &UsageError{err}
	}
	opts := Options{Image: r.Image, Args: r.Args, HasArgs: r.HasArgs, Volume: r.Volume}
	if r.LogFormat != "" {
		opts.SupervisorFlags = append(opts.SupervisorFlags, "--log-format", r.LogFormat)
	}
	if r.GracePeriod > 0 {
		opts.SupervisorFlags = append(opts.SupervisorFlags, "--grace-period", r.GracePeriod.String())
	}
	if r.RulesFile != "" {
		doc, err := readRules(r.RulesFile, r.Stdin)
		if err != nil {
			return nil, err
		}
		opts.RulesJSON = doc
	}
	if r.Volume == "" {
		path, err := supervisorBinary(r.Supervisor, r.Warn)
		if err != nil {
			return nil, err
		}
		opts.Supervisor = path
	}
	cfg, err := imageConfig(ctx, r)
	if err != nil {
		return nil, err
	}
	opts.Config = cfg
	return Args(opts)
}

func (r Request) check() error {
	switch r.Source {
	case "", "auto", "local", "registry":
	default:
		return fmt.Errorf("--source: unsupported value %q: supported values: \"auto\", \"local\", \"registry\"", r.Source)
	}
	switch r.LogFormat {
	case "", "text", "json":
	default:
		return fmt.Errorf("--log-format: unsupported value %q: supported values: \"text\", \"json\"", r.LogFormat)
	}
	if r.GracePeriod < 0 {
		return errors.New("--grace-period: must not be negative")
	}
	if r.Supervisor != "" && r.Volume != "" {
		return errors.New("--supervisor and --volume: give only one of them")
	}
	return nil
}

// readRules parses and validates the rules document the same way the
// supervisor will, so a mistake is reported here, naming the field, and not
// when the container starts; it returns the compact JSON form.
func readRules(path string, stdin io.Reader) (string, error) {
	var data []byte
	var err error
	switch {
	case path != "-":
		data, err = os.ReadFile(path)
	case stdin != nil:
		data, err = io.ReadAll(stdin)
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
func supervisorBinary(path string, warn func(string)) (string, error) {
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
			if p.Type == elf.PT_INTERP && warn != nil {
				warn(path + " is dynamically linked; build it with CGO_ENABLED=0 or it will not start in images without its C library")
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
func imageConfig(ctx context.Context, r Request) (ImageConfig, error) {
	if r.Source != "registry" {
		cfg, err := InspectLocal(ctx, r.DockerCLI, r.Image)
		if err == nil || r.Source == "local" {
			if errors.Is(err, ErrNoSuchImage) {
				return cfg, fmt.Errorf("image %s: not in the local engine; pull or build it first, or use --source registry", r.Image)
			}
			return cfg, err
		}
		// Only an image the engine lacks, or no docker CLI at all, sends the
		// lookup to the registry; an engine that cannot be asked is an error
		// rather than a silent read of a maybe different registry image.
		if !errors.Is(err, ErrNoSuchImage) && !errors.Is(err, exec.ErrNotFound) {
			return cfg, fmt.Errorf("%v (use --source registry to read the image config from its registry)", err)
		}
	}
	res, err := registry.New(registry.Options{Keychain: authn.DefaultKeychain, Timeout: r.Timeout,
		InsecureRegistries: r.InsecureRegistries}).Resolve(ctx, r.Image, "", nil)
	if err != nil {
		where := "registry"
		if r.Source != "registry" {
			where = "not in the local engine, and its registry"
		}
		return ImageConfig{}, fmt.Errorf("image %s: %s: %v", r.Image, where, err)
	}
	return pickPlatform(r.Image, res, r.Platform)
}

// pickPlatform takes the configuration of one platform of a registry image,
// as `docker run --platform` would: the exact key, then the key without its
// variant.
func pickPlatform(image string, res *imagelookup.ResolvedImage, platform string) (ImageConfig, error) {
	if platform == "" {
		platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	want := []string{platform}
	if parts := strings.Split(platform, "/"); len(parts) == 3 {
		want = append(want, parts[0]+"/"+parts[1])
	}
	for _, k := range want {
		if c, ok := res.Platforms[k]; ok {
			return ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, StopSignal: c.StopSignal, Platform: k}, nil
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
		return ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, StopSignal: c.StopSignal, Platform: match[0]}, nil
	}
	keys := make([]string, 0, len(res.Platforms))
	for k := range res.Platforms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return ImageConfig{}, fmt.Errorf("image %s: no %s image in the registry; available platforms: %s (choose one with --platform)",
		image, platform, strings.Join(keys, ", "))
}
