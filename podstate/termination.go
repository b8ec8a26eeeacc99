package podstate

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

const (
	// DefaultTerminationMessagePath is the kubelet's default
	// terminationMessagePath.
	DefaultTerminationMessagePath = "/dev/termination-log"
	// MaxTerminationMessageBytes is how much of the message the kubelet
	// keeps per container.
	MaxTerminationMessageBytes = 4096
)

// Summary is the one line a supervisor leaves in the termination message:
// "restart-supervisor: 3 in-place restarts (1 pod restart); last exit 42
// (rule 0 Restart); final exit 1". The final exit is s.LastExit when the
// state is StateExited.
func (s Status) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "restart-supervisor: %d in-place %s", s.Restarts, plural(s.Restarts, "restart", "restarts"))
	if s.PodRestarts > 0 {
		fmt.Fprintf(&b, " (%d pod %s)", s.PodRestarts, plural(s.PodRestarts, "restart", "restarts"))
	}
	if s.LastRestart != nil {
		fmt.Fprintf(&b, "; last exit %s", describeExit(*s.LastRestart))
	}
	if s.State == StateExited && s.LastExit != nil {
		fmt.Fprintf(&b, "; final exit %s", describeExit(*s.LastExit))
	}
	return b.String()
}

func describeExit(e Exit) string {
	s := fmt.Sprint(e.Code)
	var detail []string
	if e.Signal != "" {
		detail = append(detail, e.Signal)
	}
	if e.Rule != nil {
		detail = append(detail, fmt.Sprintf("rule %d %s", *e.Rule, e.Action))
	}
	if len(detail) > 0 {
		s += " (" + strings.Join(detail, ", ") + ")"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// WriteTerminationMessage writes msg to the container's termination message
// file (DefaultTerminationMessagePath when path is empty), cut to the
// kubelet's limit on a UTF-8 boundary. The file is created if missing but
// its directory is not: without it the kubelet is not reading there, and
// the error is for the caller to log, not to change the exit status.
func WriteTerminationMessage(path, msg string) error {
	if path == "" {
		path = DefaultTerminationMessagePath
	}
	msg = truncateUTF8(msg, MaxTerminationMessageBytes)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return fmt.Errorf("termination message: %w", err)
	}
	_, err = f.WriteString(msg)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("termination message: %w", err)
	}
	return nil
}

func truncateUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
