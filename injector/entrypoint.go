package injector

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup"
)

// The command a wrapped container runs: its own, or its image's
// ENTRYPOINT and CMD through the Resolver, and the signal it is stopped
// with.

// stopSignal returns the signal the runtime stops the container with,
// when the supervisor must add it to its stop signals: the container's
// lifecycle.stopSignal (1.33+, gate ContainerStopSignals), else the
// image's STOPSIGNAL, as containerd chooses.
func stopSignal(c *corev1.Container, l launch) (string, bool) {
	if c.Lifecycle != nil && c.Lifecycle.StopSignal != nil && *c.Lifecycle.StopSignal != "" {
		return contract.ExtraStopSignal(string(*c.Lifecycle.StopSignal))
	}
	return contract.ExtraStopSignal(l.stopSignal)
}

// launch is how a wrapped container's workload is started.
type launch struct {
	// argv goes after "--", following the Kubernetes command/args table;
	// the container's args stay where they are. Empty when the image's
	// entrypoint differs per platform: platforms then holds the
	// RESTART_SUPERVISOR_PLATFORM_COMMANDS value.
	argv      []string
	platforms string
	// stopSignal is the image's STOPSIGNAL, known only when the image was
	// looked up for its entrypoint.
	stopSignal string
	warnings   []string
	// fromPod: argv is the pod's own (command, or the entrypoint
	// annotation), not an image's.
	fromPod bool
}

// entrypoint works out the container's launch from its command, the
// entrypoint annotation or, failing both, the image's configuration.
func (m *mutation) entrypoint(c *corev1.Container) (launch, error) {
	var warnings []string
	object := m.object
	override, hasOverride := m.pod.Annotations[contract.AnnotationEntrypoint+c.Name]
	if len(c.Command) > 0 {
		if hasOverride {
			warnings = append(warnings, fmt.Sprintf("%s: container %q sets command; annotation %s%s is ignored", object, c.Name, contract.AnnotationEntrypoint, c.Name))
		}
		return launch{argv: c.Command, warnings: warnings, fromPod: true}, nil
	}
	if hasOverride {
		var v []string
		if err := json.Unmarshal([]byte(override), &v); err != nil || len(v) == 0 {
			return launch{}, fmt.Errorf("%s: metadata.annotations[%s%s]: want a non-empty JSON array of strings", object, contract.AnnotationEntrypoint, c.Name)
		}
		return launch{argv: v, fromPod: true}, nil
	}
	eerr := func(e error) error {
		return &EntrypointError{Object: object, Container: c.Name, Image: c.Image, Err: e}
	}
	if m.opts.Resolver == nil {
		return launch{}, eerr(fmt.Errorf("container has no command and registry lookup is disabled"))
	}
	var secrets []string
	for _, s := range m.pod.Spec.ImagePullSecrets {
		secrets = append(secrets, s.Name)
	}
	img, err := m.opts.Resolver.Resolve(m.ctx, c.Image, m.namespace, secrets)
	if err != nil {
		return launch{}, eerr(err)
	}
	hasArgs := len(c.Args) > 0
	if cfg, ok := img.Uniform(); ok {
		argv := imageArgv(cfg, hasArgs)
		if len(argv) == 0 && !hasArgs {
			return launch{}, eerr(fmt.Errorf("image %s has neither ENTRYPOINT nor CMD", img.Digest))
		}
		return launch{argv: escapeAll(argv), stopSignal: cfg.StopSignal}, nil
	}
	perPlatform := map[string][]string{}
	for k, cfg := range img.Platforms {
		argv := imageArgv(cfg, hasArgs)
		if len(argv) == 0 && !hasArgs {
			warnings = append(warnings, fmt.Sprintf("%s: container %q: image %s has neither ENTRYPOINT nor CMD on platform %s", object, c.Name, c.Image, k))
			continue
		}
		perPlatform[k] = argv
	}
	if len(perPlatform) == 0 {
		return launch{}, eerr(fmt.Errorf("image %s has neither ENTRYPOINT nor CMD on any platform", img.Digest))
	}
	sort.Strings(warnings)
	platforms, err := platformCommands(perPlatform)
	if err != nil {
		return launch{}, eerr(err)
	}
	return launch{platforms: platforms, stopSignal: img.StopSignal(), warnings: warnings}, nil
}

// MaxImageCommandsBytes caps the commands the image lookups add to one
// pod, all containers together: each container of an image gets its own
// copy, so the per-image caps alone would let many containers of one
// image build a patch of many MiB before the webhook's final bound
// (1 MiB) refused it.
const MaxImageCommandsBytes = 1 << 20

// MaxPlatformCommandsBytes caps the value of contract.EnvPlatformCommands: one
// environment string, which the kernel refuses over 128 KiB
// (MAX_ARG_STRLEN), and which every container of the image carries.
const MaxPlatformCommandsBytes = 96 << 10

// platformCommands encodes the argv of each platform as
// contract.EnvPlatformCommands, escaped for the kubelet's expansion. HTML is not
// escaped ("<" stays one byte, not six); the caps of the lookup
// (MaxImageArgvBytes) bound the input, MaxPlatformCommandsBytes the
// encoding, in which control characters and "$" still grow.
func platformCommands(perPlatform map[string][]string) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(perPlatform) // map keys are sorted: the output is deterministic
	out := escapeExpansion(strings.TrimSuffix(b.String(), "\n"))
	if len(out) > MaxPlatformCommandsBytes {
		return "", fmt.Errorf("the entrypoints of the image's %d platforms take %d bytes in %s, over the cap of %d",
			len(perPlatform), len(out), contract.EnvPlatformCommands, MaxPlatformCommandsBytes)
	}
	return out, nil
}

// imageArgv is what the image contributes before the container's args:
// ENTRYPOINT alone when args are set (Kubernetes drops CMD), else
// ENTRYPOINT+CMD.
func imageArgv(cfg imagelookup.ImageConfig, hasArgs bool) []string {
	argv := append([]string(nil), cfg.Entrypoint...)
	if !hasArgs {
		argv = append(argv, cfg.Cmd...)
	}
	return argv
}

// escapeExpansion protects text that Kubernetes would otherwise expand:
// the kubelet turns "$$" into "$" and "$(NAME)" into a variable, so
// doubling every "$" yields the original text after expansion.
func escapeExpansion(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return strings.ReplaceAll(s, "$", "$$")
}

func escapeAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = escapeExpansion(s)
	}
	return out
}
