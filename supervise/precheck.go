package supervise

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The pre-restart check (rules.PreRestartCheck): a command run before each
// restart in place, right after the exit and before the back-off's wait, so
// that a failing check hands the exit over at once (a node health check, a
// wait until the GPU's memory is reclaimed). It is a child of the
// supervisor in its own process group, reaped by the loop like every other
// child, with the workload's environment; exit 0 lets the restart go on,
// anything else (an exit code, a signal, the timeout, a command that cannot
// be started) hands the exit over. On its timeout, or when it ends, its
// whole process group is SIGKILLed. Its standard output and error go to one
// pipe, of which the first MaxPreRestartOutput bytes are kept for the log
// line and the rest is read and dropped, so a check that floods its output
// neither blocks nor grows the supervisor.

// MaxPreRestartOutput bounds what is kept of the check's output.
const MaxPreRestartOutput = 4 << 10

// preCheck is a pre-restart check in flight and the restart that waits for
// it (waiting.check).
type preCheck struct {
	spec     *rules.PreRestartCheck
	pid      int
	started  time.Time
	timer    *time.Timer
	timedOut bool
	// status is the check's exit, once reaped.
	status *ExitStatus
	// out is the pipe's read end; done is closed once the reader has seen
	// its end, and then kept and total are the reader's.
	out   *os.File
	done  chan struct{}
	kept  []byte
	total int64
	// read: the loop has taken done.
	read bool

	v     verdict
	exit  *Exit
	attrs []any
}

// startPreRestartCheck runs the check before the restart in place v and
// waits for it (waitCheck).
func (s *supervisor) startPreRestartCheck(spec *rules.PreRestartCheck, v verdict, exit *Exit, attrs []any) {
	c := &preCheck{spec: spec, v: v, exit: exit, attrs: attrs, done: make(chan struct{})}
	if err := c.spawn(s.o.Env); err != nil {
		s.handOverInstead(v, &HandOver{ReasonPreRestartCheckFailed, "the pre-restart check " + clipText(spec.Command[0], 256) + " cannot be run: " + describeStartErr(err)}, exit, attrs)
		return
	}
	s.log.Info("workload exited; running the pre-restart check", append(attrs[:len(attrs):len(attrs)], "checkPid", c.pid, "timeout", spec.Timeout())...)
	s.await(waiting{kind: waitCheck, check: c})
}

func (c *preCheck) spawn(env []string) error {
	path, err := exec.LookPath(c.spec.Command[0])
	if err != nil {
		path = c.spec.Command[0] // ForkExec reports the failure
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	pid, err := syscall.ForkExec(path, c.spec.Command, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{null.Fd(), w.Fd(), w.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	w.Close()
	if err != nil {
		r.Close()
		return err
	}
	c.pid, c.started, c.out = pid, time.Now(), r
	c.timer = time.NewTimer(c.spec.Timeout())
	go c.readOutput()
	return nil
}

// read keeps the first MaxPreRestartOutput bytes of the output and drops
// the rest, until every writer has closed the pipe or it is closed here.
func (c *preCheck) readOutput() {
	defer close(c.done)
	buf := make([]byte, MaxPreRestartOutput)
	n, _ := io.ReadFull(c.out, buf)
	c.kept = buf[:n]
	rest, _ := io.Copy(io.Discard, c.out)
	c.total = int64(n) + rest
}

func (w *waiting) checkTimeoutC() <-chan time.Time {
	if w.kind != waitCheck {
		return nil
	}
	return w.check.timer.C
}

func (w *waiting) checkOutputC() <-chan struct{} {
	if w.kind != waitCheck || w.check.read {
		return nil
	}
	return w.check.done
}

func (c *preCheck) doneSeen() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// abandon ends a check that is no longer wanted (a stop, a pod restart):
// its group is killed, the loop reaps it as an orphan.
func (c *preCheck) abandon() {
	c.timer.Stop()
	unix.Kill(-c.pid, unix.SIGKILL)
	c.out.Close()
}

// onCheckTimeout kills the check's process group. A check already reaped
// whose output is still held open (a process that left its group) has its
// pipe closed instead, which ends the read.
func (s *supervisor) onCheckTimeout() {
	c := s.wait.check
	if c.status == nil {
		c.timedOut = true
		unix.Kill(-c.pid, unix.SIGKILL)
		return
	}
	c.out.Close()
}

// reapCheck takes the status of the check in flight; it reports whether
// pid was the check.
func (s *supervisor) reapCheck(pid int, ws unix.WaitStatus) bool {
	if s.wait.kind != waitCheck || s.wait.check.pid != pid || s.wait.check.status != nil {
		return false
	}
	c := s.wait.check
	st := exitStatusOf(ws)
	c.status = &st
	// Whatever it started goes with it, and lets go of the pipe.
	unix.Kill(-pid, unix.SIGKILL)
	switch {
	case c.doneSeen():
		s.endCheck()
	case c.timedOut:
		// Its time is up: a process that left its group and holds the
		// pipe is not waited for.
		c.out.Close()
	}
	return true
}

// onCheckOutput: the reader is done; the check ends once it is reaped too.
func (s *supervisor) onCheckOutput() {
	s.wait.check.read = true
	if s.wait.check.status != nil {
		s.endCheck()
	}
}

// endCheck carries out the restart the check let through, or hands the
// exit over.
func (s *supervisor) endCheck() {
	c := s.wait.check
	s.wait.check.timer.Stop()
	c.out.Close()
	s.wait = waiting{}
	took := time.Since(c.started).Round(time.Millisecond)
	why := ""
	switch {
	case c.timedOut:
		why = "timed out after " + c.spec.Timeout().String()
	case c.status.Signal != 0:
		why = "killed by " + unix.SignalName(c.status.Signal)
	case c.status.Code != 0:
		why = "exit code " + itoa(c.status.Code)
	}
	output := strings.TrimRight(string(c.kept), "\n")
	if why == "" {
		s.log.Info("pre-restart check passed", "took", took, "output", output, "outputBytes", c.total)
		s.carryOut(c.v, c.exit, c.attrs)
		return
	}
	s.log.Warn("pre-restart check failed", "reason", why, "took", took, "output", output, "outputBytes", c.total)
	s.handOverInstead(c.v, &HandOver{ReasonPreRestartCheckFailed, "the pre-restart check " + clipText(c.spec.Command[0], 256) + " failed: " + why}, c.exit, c.attrs)
}
