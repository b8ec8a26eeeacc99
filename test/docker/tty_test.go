package docker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// terminal is the master side of a pseudo-terminal whose slave is the
// controlling terminal of a `docker run -it`, as a user's terminal would be.
type terminal struct {
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
}

// openPTY opens a new pseudo-terminal pair with the given window size.
func openPTY(t *testing.T, rows, cols uint16) (*terminal, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no /dev/ptmx: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pts: %v", err)
	}
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatalf("set window size: %v", err)
	}
	term := &terminal{master: master}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { master.Close() })
	return term, slave
}

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// wait polls the terminal's output until it holds want.
func (term *terminal) wait(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(term.output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("terminal never showed %q; it shows:\n%s", want, term.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The workload of `docker run -it` under the supervisor gets the terminal:
// a tty on stdin and stdout, the user's window size and its changes, the
// foreground process group (so job control and Ctrl-C reach it), and
// Ctrl-C ends it with 130, which these rules (restart on 42 only) do not
// restart, so the container stops. As in a pod or under docker --restart,
// the SIGINT exit is decided by the rules like any other exit: rules that
// restart on every code restart it too (see docs/docker.md).
func TestInteractiveTTY(t *testing.T) {
	need(t)
	term, slave := openPTY(t, 33, 111)
	// Field 5 of /proc/self/stat is the process group, field 8 the
	// terminal's foreground process group.
	script := counter + `test -t 0 && test -t 1 && echo "tty=$(tty)"; ` +
		`read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/self/stat; [ "$pgrp" = "$tpgid" ] && echo foreground=yes || echo "foreground=no pgrp=$pgrp tpgid=$tpgid"; ` +
		// docker run sets the container terminal's size just after the
		// container starts, so give it up to 10 s to arrive.
		`i=0; while [ "$(stty size 2>/dev/null)" != "33 111" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; ` +
		`echo "size=$(stty size)"; trap 'echo "resized=$(stty size)"' WINCH; echo ready; while :; do sleep 0.1; done`
	argv := dockerArgs(t, busyboxImage, rules42, "sh", "-c", script)
	name := fmt.Sprintf("rs-e2e-tty-%d", time.Now().UnixNano()%1e6)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	cmd := exec.Command("docker", append([]string{"run", "--rm", "-it", "--name", name, "--label", containerLabel}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	term.wait(t, "ready", 30*time.Second)
	t.Run("stdin and stdout are a tty", func(t *testing.T) {
		if !strings.Contains(term.output(), "tty=/dev/pts/") {
			t.Errorf("workload has no tty:\n%s", term.output())
		}
	})
	t.Run("workload is the terminal's foreground process group", func(t *testing.T) {
		if !strings.Contains(term.output(), "foreground=yes") {
			t.Errorf("workload is not in the foreground (job control and terminal-generated signals would miss it):\n%s", term.output())
		}
	})
	t.Run("window size and its changes", func(t *testing.T) {
		if !strings.Contains(term.output(), "size=33 111") {
			t.Errorf("workload does not see the terminal's 33x111 size:\n%s", term.output())
		}
		// The kernel sends SIGWINCH to the docker client, which resizes the
		// container's terminal; the workload must get SIGWINCH too.
		if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120}); err != nil {
			t.Fatal(err)
		}
		term.wait(t, "resized=40 120", 30*time.Second)
	})
	t.Run("Ctrl-C stops without a restart", func(t *testing.T) {
		if _, err := term.master.Write([]byte{3}); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("docker run -it still running 30s after Ctrl-C; terminal:\n%s", term.output())
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != 130 {
			t.Errorf("exit code after Ctrl-C = %d, want 130 (SIGINT)", code)
		}
		if strings.Contains(term.output(), "run 2") {
			t.Errorf("Ctrl-C restarted the workload:\n%s", term.output())
		}
	})
}

// An interactive shell under the supervisor has job control: Ctrl-Z stops
// its foreground job (the terminal sends SIGTSTP to that job's group), the
// shell lists it as stopped and resumes it with fg.
func TestInteractiveShellJobControl(t *testing.T) {
	need(t)
	term, slave := openPTY(t, 24, 80)
	argv := dockerArgs(t, busyboxImage, rules42, "sh", "-i")
	name := fmt.Sprintf("rs-e2e-jobs-%d", time.Now().UnixNano()%1e6)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	cmd := exec.Command("docker", append([]string{"run", "--rm", "-it", "-e", "PS1=$ ", "--name", name, "--label", containerLabel}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	typeLine := func(s string) {
		t.Helper()
		if _, err := term.master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	term.wait(t, "$ ", 30*time.Second)
	typeLine("sleep 300\r")
	time.Sleep(500 * time.Millisecond)
	typeLine("\x1a") // Ctrl-Z
	term.wait(t, "Stopped", 30*time.Second)
	typeLine("jobs; echo jobs-listed\r")
	term.wait(t, "jobs-listed", 30*time.Second)
	typeLine("fg\r")
	time.Sleep(500 * time.Millisecond)
	typeLine("\x03") // Ctrl-C ends the resumed sleep, not the shell
	typeLine("echo shell-alive\r")
	term.wait(t, "shell-alive", 30*time.Second)
	typeLine("exit 0\r")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("docker run -it sh -i: %v; terminal:\n%s", err, term.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("shell did not exit; terminal:\n%s", term.output())
	}
	if strings.Contains(term.output(), restartLine) {
		t.Errorf("the shell was restarted:\n%s", term.output())
	}
	t.Logf("terminal:\n%s", term.output())
}
