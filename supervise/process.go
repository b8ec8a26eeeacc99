package supervise

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StartError is a failure to execute the workload. Its Status follows the
// shell convention that tini also uses: 127 when the command does not
// exist, 126 when it exists but cannot be executed.
type StartError struct {
	Command string
	Err     error
}

func (e *StartError) Error() string { return e.Command + ": " + describeStartErr(e.Err) }

func (e *StartError) Unwrap() error { return e.Err }

// Status is the exit status to report for the failure.
func (e *StartError) Status() int {
	if errors.Is(e.Err, unix.ENOENT) || errors.Is(e.Err, unix.ENOTDIR) || errors.Is(e.Err, errNotFound) {
		return 127
	}
	return 126
}

var errNotFound = errors.New("command not found")

func describeStartErr(err error) string {
	switch {
	case errors.Is(err, errNotFound):
		return "command not found"
	case errors.Is(err, unix.EACCES):
		return "permission denied (not executable)"
	case errors.Is(err, unix.ENOEXEC):
		return "cannot execute: exec format error"
	}
	return err.Error()
}

// NotFound returns the StartError for a command that PATH lookup could not
// find.
func NotFound(command string) *StartError { return &StartError{command, errNotFound} }

// ExitStatus is how one run of the workload ended.
type ExitStatus struct {
	Code   int            // exit code, or 128+signal as a container runtime reports it
	Signal syscall.Signal // the signal that killed it, 0 when it exited
}

func exitStatusOf(ws unix.WaitStatus) ExitStatus {
	if ws.Signaled() {
		sig := ws.Signal()
		return ExitStatus{Code: 128 + int(sig), Signal: sig}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// process is one run of the workload. It leads its own process group, so
// pid is also the group id.
type process struct {
	pid     int
	started time.Time
}

// spawn starts the workload with files as its fds 0, 1 and 2: ours, handed
// over as they are, so output is byte-exact and unbuffered and no
// grandchild can hold an EOF back; or, with a watchdog's output pattern,
// an output tap's pipe where our fd is not a terminal (output.go). The child leads a new process group so that signals
// and the final SIGKILL reach everything it started; when our stdin is our
// controlling terminal the new group also takes the terminal's foreground,
// as tini does, so that job control and Ctrl-C work. The kernel reports a
// failing exec through ForkExec's close-on-exec pipe, so a missing or
// non-executable command is an error here, not a mysterious exit code.
func spawn(path string, argv, env []string, files []uintptr, tty bool) (*process, error) {
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	if tty {
		attr.Sys.Foreground = true
		attr.Sys.Ctty = 0
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return nil, &StartError{Command: argv[0], Err: err}
	}
	return &process{pid: pid, started: time.Now()}, nil
}

// ownsTerminal reports whether fd 0 is our controlling terminal and our
// process group is its foreground group. Only then do the workload's runs
// take the terminal over: a supervisor started in the background of an
// interactive shell must not steal the shell's terminal.
func ownsTerminal() bool {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// reaped is one child collected by wait4.
type reaped struct {
	pid    int
	status unix.WaitStatus
}

// reapAll collects every child that has exited, until wait4 says none is
// left (ECHILD) or the rest are still running (0). WNOHANG returns 0 with
// a nil error while children run, so the loop must stop there rather than
// spin (consul-template#507). Orphans re-parented to us are reaped here
// too; only the workload's status is of interest to the caller. It reports
// whether children remain.
func reapAll(fn func(reaped)) (childrenLeft bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return err == nil
		}
		fn(reaped{pid, ws})
	}
}

// groupDrainTimeout bounds how long we wait for killed processes to
// vanish; a process stuck in uninterruptible sleep must not stall the
// supervisor forever.
const groupDrainTimeout = 5 * time.Second

// killRemnants SIGKILLs whatever is left of a run and reaps it, so that a
// restart starts as clean as a new container: first the run's process
// group (pgid; 0 for none), then every remaining descendant of the
// supervisor, including those that left the group with setsid or by
// double-forking. As PID 1 or child subreaper every orphan of the run is
// re-parented to us, so the descendants are our children and theirs: the
// loop kills our children, reaps, and repeats until wait4 reports that we
// have no child at all (ECHILD), which proves nothing of the run is left.
// When nothing is left, which is the common case, that costs one wait4.
//
// It does not kill(-1, SIGKILL) as PID 1, although that would be shorter:
// processes entered into the container from outside (kubectl exec, the
// kubelet's exec probes) are not ours, not the run's, and must not die
// with it.
//
// It returns whether everything vanished within groupDrainTimeout. When
// /proc is not this PID namespace's, descendants cannot be found; then
// only the process group is killed and waited for, as before.
func killRemnants(pgid int, onReap func(reaped)) bool {
	if pgid > 0 {
		unix.Kill(-pgid, unix.SIGKILL)
	}
	deadline := time.Now().Add(groupDrainTimeout)
	for {
		if !reapAll(onReap) {
			return true
		}
		kids, ok := children()
		if !ok {
			return pgid <= 0 || killGroup(pgid, onReap)
		}
		for _, pid := range kids {
			unix.Kill(pid, unix.SIGKILL)
		}
		if time.Now().After(deadline) {
			return false
		}
		// Killed processes exit, and their own children are re-parented
		// to us, asynchronously: give the kernel a moment.
		time.Sleep(time.Millisecond)
	}
}

// killGroup SIGKILLs process group pgid and reaps until the group is gone.
// A group exists as long as one member, zombie or not, is unreaped; as PID
// 1 or subreaper every orphaned member comes to us, so "kill(-pgid, 0)
// fails with ESRCH" means nothing of that group is left. It returns
// whether the group vanished within the timeout.
func killGroup(pgid int, onReap func(reaped)) bool {
	deadline := time.Now().Add(groupDrainTimeout)
	for {
		err := unix.Kill(-pgid, unix.SIGKILL)
		reapAll(onReap)
		if err == unix.ESRCH {
			return true
		}
		if unix.Kill(-pgid, 0) == unix.ESRCH {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// becomeSubreaper makes orphaned descendants re-parent to us instead of to
// the namespace's init, so that we can reap them and kill them before a
// restart. PID 1 gets them anyway.
func becomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}
