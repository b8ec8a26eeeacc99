package podstate

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

const (
	// MaxTerminationMessageBytes is how much of the message the kubelet
	// keeps per container.
	MaxTerminationMessageBytes = 4096
)

// Summary is the one line a supervisor leaves in the termination message:
// "restart-supervisor: 3 in-place restarts (1 pod restart); last exit 42
// (rule 0 Restart); final exit 1". The final exit is s.LastExit when the
// state is contract.PhaseExited.
func Summary(s statevol.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "restart-supervisor: %d in-place %s", s.Restarts, plural(s.Restarts, "restart", "restarts"))
	if s.PodRestarts > 0 {
		fmt.Fprintf(&b, " (%d pod %s)", s.PodRestarts, plural(s.PodRestarts, "restart", "restarts"))
	}
	if s.LastRestart != nil {
		fmt.Fprintf(&b, "; last exit %s", describeExit(*s.LastRestart))
	}
	if s.State == contract.PhaseExited && s.LastExit != nil {
		fmt.Fprintf(&b, "; final exit %s", describeExit(*s.LastExit))
	}
	if s.State == contract.PhaseExited && s.HandOver != nil {
		// The supervisor's own reason, bounded where it is made; the
		// kubelet shows this line in the container's lastState.
		fmt.Fprintf(&b, "; handed over: %s", s.HandOver.Reason)
	}
	return b.String()
}

func describeExit(e statevol.Exit) string {
	s := fmt.Sprint(e.Code)
	var detail []string
	if e.Signal != "" {
		detail = append(detail, e.Signal)
	}
	if e.Rule != nil {
		detail = append(detail, fmt.Sprintf("rule %d %s", *e.Rule, e.Action))
	}
	if e.PodRestart > 0 {
		detail = append(detail, fmt.Sprintf("pod restart %d", e.PodRestart))
	}
	if e.Reason != "" {
		detail = append(detail, e.Reason)
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

// WriteTerminationMessage adds msg as a line to the container's termination
// message file (contract.DefaultTerminationMessagePath when path is empty). What the
// workload wrote there itself stays whole: the kubelet reads the last
// MaxTerminationMessageBytes of the file (pkg/util/tail ReadAtMost, from
// kuberuntime_container.go getTerminationMessage, v1.37.2), so msg is cut
// (on a UTF-8 boundary) to the room left below that, or left out when there
// is none, and never pushes the workload's own words out. The file is created if
// missing but its directory is not: without it the kubelet is not reading
// there, and the error is for the caller to log, not to change the exit
// status.
func WriteTerminationMessage(path, msg string) error {
	return WriteTerminationMessageUnlessEmpty(path, msg, false)
}

// WriteTerminationMessageUnlessEmpty is WriteTerminationMessage, except that
// with keepEmpty a file the workload left empty stays empty: a container
// under terminationMessagePolicy FallbackToLogsOnError that failed then
// shows its log's tail, as it would natively.
func WriteTerminationMessageUnlessEmpty(path, msg string, keepEmpty bool) error {
	if path == "" {
		path = contract.DefaultTerminationMessagePath
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("termination message: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("termination message: %w", err)
	}
	size := fi.Size()
	if keepEmpty && size == 0 {
		return nil
	}
	if size > 0 && fi.Mode().IsRegular() {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, size-1); err == nil && last[0] != '\n' {
			msg = "\n" + msg
		}
	}
	room := MaxTerminationMessageBytes - int(size)
	if room <= 0 || strings.TrimSpace(msg) == "" {
		return nil
	}
	if _, err := f.WriteString(truncateUTF8(msg, room)); err != nil {
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

// EmptyTerminationMessage empties the termination message file before an
// in-place run, as the kubelet gives every container instance a new empty
// one (kuberuntime_container.go makeMounts, v1.37.2): what an earlier run
// wrote is that run's message, not the next one's. Only a regular file is
// emptied; the path is not followed if it is a symbolic link, and a FIFO
// or device is left alone (opened without blocking, never truncated).
// A missing file is not an error: then the kubelet reads nothing there.
func EmptyTerminationMessage(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		return fmt.Errorf("termination message: %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("termination message: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
		return nil
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("termination message: %s: %w", path, err)
	}
	return nil
}
