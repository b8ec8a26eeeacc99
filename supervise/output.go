package supervise

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"time"

	"golang.org/x/sys/unix"
)

// An output tap stands between the workload and one of the supervisor's
// own output descriptors (1 or 2) when the watchdog has an output
// pattern: the workload writes into a pipe, and a goroutine writes every
// byte on, as soon as it is read and unchanged, to where the output went
// before, and matches each complete line against the pattern. Without a
// pattern there is no tap and the workload gets the descriptors
// themselves (spawn). A terminal is never tapped: the workload keeps it,
// and with it its line discipline and job control.
//
// The pipe lives as long as the supervisor, so that a grandchild that
// outlives a run cannot end the copy; at the end the supervisor closes
// its write end and waits, bounded, for the copy to drain what is left.

// maxTappedLine bounds the part of a line that is kept to be matched: a
// line longer than this is matched on its first maxTappedLine bytes, and
// the rest is written on without being kept.
const maxTappedLine = 64 << 10

// tapDrainTimeout bounds the wait for a tap's last bytes at the end: a
// process that escaped the run's kill and holds the pipe would hold the
// supervisor's exit.
const tapDrainTimeout = 2 * time.Second

type outputTap struct {
	fd   int      // 1 or 2: where the bytes go on
	w    *os.File // the pipe's write end, the workload's fd
	done chan struct{}
}

// outputTaps are the taps of fd 1 and 2, nil where that output is not
// tapped.
type outputTaps [2]*outputTap

// startTaps taps the supervisor's standard output and error that are not
// terminals. Each matching line sends on beats, without blocking.
func startTaps(pattern *patternHolder, beats chan<- struct{}) (outputTaps, error) {
	var taps outputTaps
	for i, fd := range []int{1, 2} {
		if isTerminal(fd) {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			taps.close()
			return outputTaps{}, err
		}
		t := &outputTap{fd: fd, w: w, done: make(chan struct{})}
		go t.copy(r, pattern, beats)
		taps[i] = t
	}
	return taps, nil
}

// files returns the descriptors a run gets as its 0, 1 and 2.
func (taps outputTaps) files() []uintptr {
	files := []uintptr{0, 1, 2}
	for i, t := range taps {
		if t != nil {
			files[i+1] = t.w.Fd()
		}
	}
	return files
}

// tapped reports whether any output is tapped.
func (taps outputTaps) tapped() bool { return taps[0] != nil || taps[1] != nil }

// close closes the write ends and waits, within tapDrainTimeout in all,
// for each copy to write what is left.
func (taps outputTaps) close() {
	deadline := time.NewTimer(tapDrainTimeout)
	defer deadline.Stop()
	for _, t := range taps {
		if t == nil {
			continue
		}
		t.w.Close()
		select {
		case <-t.done:
		case <-deadline.C:
			return
		}
	}
}

// copy writes what it reads from r on to t.fd and matches each line.
func (t *outputTap) copy(r *os.File, pattern *patternHolder, beats chan<- struct{}) {
	defer close(t.done)
	defer r.Close()
	buf := make([]byte, 64<<10)
	m := &lineMatcher{line: make([]byte, 0, 4<<10), beats: beats}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			writeAll(t.fd, buf[:n])
			m.feed(buf[:n], pattern.Load())
		}
		if err != nil {
			return
		}
	}
}

// writeAll writes b to fd, retrying short writes and EINTR/EAGAIN; an
// output that cannot be written (closed, full disk) drops the bytes, as
// the workload's own write would have failed.
func writeAll(fd int, b []byte) {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if n > 0 {
			b = b[n:]
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			time.Sleep(time.Millisecond)
		case err != nil || n == 0:
			return
		}
	}
}

// beatQuiet is how long after a matching line the output is not matched
// again: one heartbeat moves a deadline of seconds, and a workload that
// prints a matching line per step, thousands a second, must not pay a
// match per line. Lines are still written on as they come.
const beatQuiet = 100 * time.Millisecond

// lineMatcher matches the lines of one output against the pattern.
type lineMatcher struct {
	line  []byte    // the start of the line not yet ended, at most maxTappedLine bytes
	quiet time.Time // no matching before this
	beats chan<- struct{}
}

// feed takes the next bytes of the output.
func (m *lineMatcher) feed(chunk []byte, re *regexp.Regexp) {
	if re == nil || time.Now().Before(m.quiet) || !m.mayMatch(chunk, re) {
		m.skip(chunk)
		return
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		part := chunk
		if i >= 0 {
			part = chunk[:i]
		}
		m.hold(part)
		if i < 0 {
			return
		}
		matched := re.Match(m.line)
		m.line = m.line[:0]
		chunk = chunk[i+1:]
		if matched {
			select {
			case m.beats <- struct{}{}:
			default:
			}
			m.quiet = time.Now().Add(beatQuiet)
			m.skip(chunk)
			return
		}
	}
}

// mayMatch is false when no line chunk ends can match: every match of a
// pattern with a literal prefix holds the prefix, and one search of the
// chunk (with the end of the held line before it) is far cheaper than a
// match per line of a log that never says it.
func (m *lineMatcher) mayMatch(chunk []byte, re *regexp.Regexp) bool {
	prefix, _ := re.LiteralPrefix()
	if prefix == "" || bytes.Contains(chunk, []byte(prefix)) {
		return true
	}
	k := len(prefix) - 1
	seam := append(append([]byte(nil), m.line[max(0, len(m.line)-k):]...), chunk[:min(k, len(chunk))]...)
	return bytes.Contains(m.line, []byte(prefix)) || bytes.Contains(seam, []byte(prefix))
}

// skip takes chunk without matching: only the line it leaves open is
// held, for the next match.
func (m *lineMatcher) skip(chunk []byte) {
	if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
		m.line = m.line[:0]
		chunk = chunk[i+1:]
	}
	m.hold(chunk)
}

// hold adds part to the held line, up to maxTappedLine bytes.
func (m *lineMatcher) hold(part []byte) {
	if room := maxTappedLine - len(m.line); room > 0 {
		m.line = append(m.line, part[:min(len(part), room)]...)
	}
}
