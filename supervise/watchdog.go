package supervise

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The watchdog (rules.Watchdog) ends a run that stopped making progress
// without exiting. It is armed at every start and disarmed at every exit,
// as the probes are: a heartbeat is a change of the heartbeat file, seen
// by lstat every pollEvery, or a line of the workload's output that
// matches the pattern (output.go), delivered to the loop through
// runProbes.beats. The deadline is the run's start plus the first
// heartbeat's timeout, then each heartbeat plus the stall timeout. When
// it passes, the file is looked at once more, and then the run is stopped
// as a probe kill stops it (the stop signal, the grace period, the whole
// process tree); its exit is judged as the watchdog's exit code with
// reason Stalled (onWorkloadExit).

// watchdog is the current run's watchdog.
type watchdog struct {
	spec     *rules.Watchdog
	deadline *time.Timer
	poll     *time.Ticker // nil without a heartbeat file
	file     fileMark     // the heartbeat file as last seen
	beats    int          // heartbeats this run
	last     time.Time    // the last heartbeat, or the start
	// warned: a heartbeat file that is not a regular file was logged
	// once this run.
	warned bool
}

// fileMark is what tells a heartbeat file's change: a write changes its
// size or modification time, a touch its modification time, a
// replacement (write to a temporary file, rename) its inode.
type fileMark struct {
	ok        bool // a regular file was there
	ino, size uint64
	mtime     unix.Timespec
}

// markOf looks at path without following a link or opening it: no
// content is read, so a FIFO cannot block the loop and a file that grows
// for ever costs one lstat. Anything but a regular file is no mark.
func markOf(path string) (m fileMark, special bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileMark{}, false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileMark{}, true
	}
	return fileMark{ok: true, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim}, false
}

// pollEvery is how often the heartbeat file is looked at: a tenth of the
// stall timeout, between 100 ms and 1 s, so that a stall is seen within
// a second of its deadline and a short timeout is not overrun by the poll.
func pollEvery(stall time.Duration) time.Duration {
	return min(max(stall/10, 100*time.Millisecond), time.Second)
}

// armWatchdog starts the watchdog of the configuration in force for the
// run that has just started.
func (s *supervisor) armWatchdog() {
	s.disarmWatchdog()
	spec := s.config().Watchdog
	s.probes.pattern.Store(nil)
	if spec == nil {
		return
	}
	// A watchdog that can see no heartbeat would stop every run: an output
	// pattern with no tap (the output is a terminal, or the pattern came
	// with a reload after the start) and no heartbeat file. It is not
	// armed, and the log says so once.
	if spec.HeartbeatFile == "" && !s.probes.taps.tapped() {
		if !s.probes.unwatched {
			s.probes.unwatched = true
			s.log.Warn("the watchdog sees no heartbeat (its outputPattern is not watched: the output is a terminal, or the pattern came after the start, and it has no heartbeatFile); runs are not watched")
		}
		return
	}
	d := &watchdog{spec: spec, last: s.hist.lastStart, deadline: time.NewTimer(spec.FirstHeartbeat())}
	if spec.HeartbeatFile != "" {
		// The file as the run found it: what an earlier run left is no
		// heartbeat of this one.
		d.file, _ = markOf(spec.HeartbeatFile)
		d.poll = time.NewTicker(pollEvery(spec.Stall()))
	}
	if re := spec.Pattern(); re != nil {
		s.probes.pattern.Store(newLinePattern(re))
	}
	// A beat a line sent for the run before is none of this one's.
	select {
	case <-s.probes.beats:
	default:
	}
	s.probes.dog = d
}

// disarmWatchdog stops the current run's watchdog.
func (s *supervisor) disarmWatchdog() {
	if d := s.probes.dog; d != nil {
		d.deadline.Stop()
		if d.poll != nil {
			d.poll.Stop()
		}
	}
	s.probes.dog = nil
	s.probes.pattern.Store(nil)
}

func (d *watchdog) deadlineC() <-chan time.Time {
	if d == nil {
		return nil
	}
	return d.deadline.C
}

func (d *watchdog) pollC() <-chan time.Time {
	if d == nil || d.poll == nil {
		return nil
	}
	return d.poll.C
}

// beatsC delivers the output's heartbeats while a watchdog is armed.
func (s *supervisor) beatsC() <-chan struct{} {
	if s.probes.dog == nil {
		return nil
	}
	return s.probes.beats
}

// onHeartbeatPoll looks at the heartbeat file; a change is a heartbeat.
func (s *supervisor) onHeartbeatPoll() {
	d := s.probes.dog
	m, special := markOf(d.spec.HeartbeatFile)
	if special && !d.warned {
		d.warned = true
		s.log.Warn("the heartbeat file is not a regular file; it shows no progress", "file", d.spec.HeartbeatFile)
	}
	if m != d.file {
		d.file = m
		if m.ok {
			s.onHeartbeat("file")
		}
	}
}

// onHeartbeat moves the deadline to a stall timeout from now.
func (s *supervisor) onHeartbeat(from string) {
	d := s.probes.dog
	if d == nil || s.proc == nil || s.ending.cause != endNone {
		return
	}
	d.beats++
	d.last = time.Now()
	if d.beats == 1 {
		s.log.Info("first heartbeat", "pid", s.proc.pid, "from", from, "after", d.last.Sub(s.hist.lastStart).Round(time.Millisecond))
	}
	d.deadline.Reset(d.spec.Stall())
}

// onStallDeadline ends the run unless a heartbeat came in the meantime.
func (s *supervisor) onStallDeadline() {
	d := s.probes.dog
	if d.spec.HeartbeatFile != "" {
		s.onHeartbeatPoll()
		if time.Since(d.last) < d.spec.Stall() && d.beats > 0 {
			return // the poll found one; the deadline was moved
		}
	}
	if s.proc == nil || s.ending.cause != endNone {
		return
	}
	timeout, since := d.spec.Stall(), "the last heartbeat"
	if d.beats == 0 {
		timeout, since = d.spec.FirstHeartbeat(), "the start"
	}
	grace := DefaultProbeGrace
	if g := d.spec.GracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	sig := s.o.PodRestartSignal
	s.log.Warn("no heartbeat within "+timeout.String()+" of "+since+"; stopping the stalled workload, then judging its exit as exit code "+itoa(int(d.spec.Code())),
		"pid", s.proc.pid, "heartbeats", d.beats, "signal", unix.SignalName(sig), "gracePeriod", grace, "reason", rules.ReasonStalled)
	s.ending = ending{cause: endStall}
	s.disarmProbes()
	s.stopRun(sig, grace, true)
}

// stalledExit makes the exit of a run the watchdog stopped the one the
// rules judge: the watchdog's exit code, reason Stalled. The workload's
// own status (the stop signal's, or SIGKILL's) stays in the log.
func stalledExit(exit *Exit, spec *rules.Watchdog) {
	code := rules.DefaultStallExitCode
	if spec != nil {
		code = spec.Code()
	}
	exit.ExitStatus = ExitStatus{Code: int(code)}
	exit.Reason = rules.ReasonStalled
}

// patternHolder is the pattern the output's lines are matched against:
// set while a run with one is watched, nil otherwise, read by the output
// taps' goroutines.
type patternHolder = atomic.Pointer[linePattern]

// isTerminal reports whether fd is a terminal, which the workload keeps.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
