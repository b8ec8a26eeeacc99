package supervise

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"regexp/syntax"
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

// linePattern is the watchdog's pattern, matched line by line: line as
// written, and region, the same pattern made unable to match a newline
// (every class and every "." without it, a newline in a literal never
// matching) with ^, $, \A and \z at each line's start and end. A match of
// region in a run of whole lines is then a match of line in one of them,
// so a read of many short lines costs one match, not one per line.
type linePattern struct {
	line, region *regexp.Regexp
	// needs are literals one of which every match holds; none when the
	// pattern has no such set (see required).
	needs [][]byte
}

func newLinePattern(re *regexp.Regexp) *linePattern {
	p := &linePattern{line: re, region: re}
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return p // compiled already: cannot happen; one match per line then
	}
	for _, lit := range required(tree.Simplify()) {
		p.needs = append(p.needs, []byte(lit))
	}
	withoutNewline(tree)
	if region, err := regexp.Compile(tree.String()); err == nil {
		p.region = region
	}
	return p
}

// maxNeeds bounds the literals of a required set: a search per literal.
const maxNeeds = 16

// required returns literals one of which every match of re holds (nil when
// it finds no such set): a literal itself; the best set of a
// concatenation's parts (the one whose shortest literal is longest); the
// union of an alternation's, when each has one; a repetition's at least
// once. Case-folded literals have no set.
func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 || len(re.Rune) == 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []string
		for _, sub := range re.Sub {
			if set := required(sub); set != nil && (best == nil || shortest(set) > shortest(best)) {
				best = set
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			set := required(sub)
			if set == nil || len(all)+len(set) > maxNeeds {
				return nil
			}
			all = append(all, set...)
		}
		return all
	}
	return nil
}

func shortest(set []string) int {
	n := len(set[0])
	for _, s := range set[1:] {
		n = min(n, len(s))
	}
	return n
}

// withoutNewline rewrites re so that no part of it matches a newline and
// its text anchors are line anchors.
func withoutNewline(re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpAnyChar:
		re.Op = syntax.OpAnyCharNotNL
	case syntax.OpCharClass:
		var r []rune
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			switch {
			case lo == '\n' && hi == '\n':
			case lo == '\n':
				r = append(r, '\n'+1, hi)
			case hi == '\n':
				r = append(r, lo, '\n'-1)
			case lo < '\n' && '\n' < hi:
				r = append(r, lo, '\n'-1, '\n'+1, hi)
			default:
				r = append(r, lo, hi)
			}
		}
		if len(r) == 0 {
			re.Op, re.Rune = syntax.OpNoMatch, nil
		} else {
			re.Rune = r
		}
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			if c == '\n' {
				re.Op, re.Rune = syntax.OpNoMatch, nil
				break
			}
		}
	case syntax.OpBeginText:
		re.Op = syntax.OpBeginLine
	case syntax.OpEndText:
		re.Op = syntax.OpEndLine
	}
	for _, sub := range re.Sub {
		withoutNewline(sub)
	}
}

// lineMatcher matches the lines of one output against the pattern.
type lineMatcher struct {
	line  []byte    // the start of the line not yet ended, at most maxTappedLine bytes
	quiet time.Time // no matching before this
	beats chan<- struct{}
}

// feed takes the next bytes of the output: the line held from before is
// ended by the first newline and matched alone; the whole lines after it,
// up to the last newline, are matched at once (linePattern.region); what
// follows is held.
func (m *lineMatcher) feed(chunk []byte, p *linePattern) {
	if p == nil || time.Now().Before(m.quiet) || !m.mayMatch(chunk, p) {
		m.skip(chunk)
		return
	}
	i := bytes.IndexByte(chunk, '\n')
	if i < 0 {
		m.hold(chunk)
		return
	}
	m.hold(chunk[:i])
	matched := p.line.Match(m.line)
	m.line = m.line[:0]
	rest := chunk[i+1:]
	last := bytes.LastIndexByte(rest, '\n')
	if !matched && last >= 0 {
		matched = p.region.Match(rest[:last])
	}
	m.skip(rest)
	if matched {
		select {
		case m.beats <- struct{}{}:
		default:
		}
		m.quiet = time.Now().Add(beatQuiet)
	}
}

// mayMatch is false when no line chunk ends can match: every match holds
// one of the pattern's required literals (linePattern.needs), and a search
// for them (with the end of the held line before the chunk) is far
// cheaper than a match of a log that never says them.
func (m *lineMatcher) mayMatch(chunk []byte, p *linePattern) bool {
	if len(p.needs) == 0 {
		return true
	}
	for _, lit := range p.needs {
		if bytes.Contains(chunk, lit) || bytes.Contains(m.line, lit) {
			return true
		}
		k := len(lit) - 1
		seam := append(append([]byte(nil), m.line[max(0, len(m.line)-k):]...), chunk[:min(k, len(chunk))]...)
		if bytes.Contains(seam, lit) {
			return true
		}
	}
	return false
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
