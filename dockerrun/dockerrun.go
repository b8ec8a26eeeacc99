// Package dockerrun turns an image's ENTRYPOINT and CMD into the `docker run`
// arguments that run the image under restart-supervisor without rebuilding
// it: the supervisor binary mounted read-only from the host (or from a named
// volume), set as the entrypoint, the rules in RESTART_SUPERVISOR_CONFIG and
// the image's own command after `--`.
//
// Docker does not tell a container what its image's ENTRYPOINT was, and
// `docker run --entrypoint` also drops the image's CMD, so both have to be
// read from the image config and written out again; this package owns that,
// the shell quoting of the result, and (in Build) gathering what goes in:
// the validated rules document, the supervisor binary, and the image config
// from the local engine or the image's registry. Args, Command and
// ShellQuote do no I/O.
package dockerrun

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// ImageConfig is the part of an image's configuration that decides what a
// container runs.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	// StopSignal is the image's STOPSIGNAL, which `docker stop` sends to
	// the supervisor instead of SIGTERM.
	StopSignal string
	// Platform is "os/arch" or "os/arch/variant"; informational.
	Platform string
}

// Options describe one `docker run` under the supervisor.
type Options struct {
	Image string
	// Config is the image's configuration (see InspectLocal).
	Config ImageConfig
	// Args, when HasArgs is set, replace the image's CMD, as arguments after
	// the image name do in `docker run IMAGE ARGS...`.
	Args    []string
	HasArgs bool
	// Exactly one of Supervisor (absolute host path of a static
	// restart-supervisor binary, bind-mounted read-only) and Volume (a named
	// volume that `restart-supervisor install` filled, mounted read-only at
	// contract.BinDir) must be set.
	Supervisor string
	Volume     string
	// RulesJSON is the compact configuration document put into
	// RESTART_SUPERVISOR_CONFIG; empty leaves the variable out, and the
	// supervisor then runs with its defaults.
	RulesJSON string
	// SupervisorFlags go between the supervisor and `--` (e.g. --log-format json).
	SupervisorFlags []string
}

// Command returns the argv the container will run once the supervisor
// starts it: the image ENTRYPOINT followed by the CMD (or the Args that
// replace it), exactly as Docker would have run the image.
func Command(o Options) ([]string, error) {
	args := o.Config.Cmd
	if o.HasArgs {
		args = o.Args
	}
	argv := append(append([]string{}, o.Config.Entrypoint...), args...)
	if len(argv) == 0 {
		return nil, fmt.Errorf("image %s: has neither ENTRYPOINT nor CMD; give the command after --", o.Image)
	}
	return argv, nil
}

// Args returns the `docker run` arguments, from the first option to the last
// word of the workload's command, without the leading `docker run`.
func Args(o Options) ([]string, error) {
	if o.Image == "" {
		return nil, errors.New("image: must be specified")
	}
	if strings.HasPrefix(o.Image, "-") {
		return nil, fmt.Errorf("image %q: must not start with '-'", o.Image)
	}
	var mount string
	switch {
	case o.Supervisor != "" && o.Volume != "":
		return nil, errors.New("supervisor and volume: give only one of them")
	case o.Supervisor != "":
		if !filepath.IsAbs(o.Supervisor) {
			return nil, fmt.Errorf("supervisor %q: must be an absolute path (docker -v needs one)", o.Supervisor)
		}
		if strings.Contains(o.Supervisor, ":") {
			return nil, fmt.Errorf("supervisor %q: must not contain ':' (docker -v splits on it)", o.Supervisor)
		}
		mount = o.Supervisor + ":" + contract.SupervisorPath + ":ro"
	case o.Volume != "":
		if strings.ContainsAny(o.Volume, ":/") {
			return nil, fmt.Errorf("volume %q: must be a volume name, without ':' or '/'", o.Volume)
		}
		mount = o.Volume + ":" + contract.BinDir + ":ro"
	default:
		return nil, errors.New("supervisor: must be specified (a host path to the binary, or a volume)")
	}
	argv, err := Command(o)
	if err != nil {
		return nil, err
	}
	out := []string{"-v", mount, "--entrypoint", contract.SupervisorPath}
	if o.RulesJSON != "" {
		out = append(out, "-e", contract.EnvConfig+"="+o.RulesJSON)
	}
	if sig, ok := contract.ExtraStopSignal(o.Config.StopSignal); ok {
		// docker stop sends the image's STOPSIGNAL: the supervisor must
		// take it as a stop, not forward it and judge the exit by the rules.
		out = append(out, "-e", contract.EnvStopSignals+"=SIGTERM,SIGINT,"+sig)
	}
	out = append(out, o.Image)
	out = append(out, o.SupervisorFlags...)
	out = append(out, "--")
	return append(out, argv...), nil
}

// ShellQuote renders argv as one POSIX shell line: words made only of
// characters the shell leaves alone stay bare, the rest are single-quoted
// (a single quote inside becomes '\”), so the line can be pasted after
// `docker run` or handed to eval.
func ShellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(a))
	}
	return b.String()
}

func quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			strings.ContainsRune("-_./:,=@%+", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
