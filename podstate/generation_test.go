package podstate

import (
	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"

	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the processes of other containers: with
// PODSTATE_TEST_ROLE set it plays that role instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("PODSTATE_TEST_ROLE") {
	case "":
		os.Exit(m.Run())
	case "statevol.AnnounceWith":
		os.Exit(announceRole())
	case "member":
		os.Exit(memberRole())
	case "op":
		os.Exit(opRole())
	case "live":
		os.Exit(liveRole())
	default:
		fmt.Fprintln(os.Stderr, "unknown PODSTATE_TEST_ROLE")
		os.Exit(3)
	}
}

// announceRole waits for the start file so that all announcers race, then
// announces once and prints the outcome.
func announceRole() int {
	dir, start := os.Getenv("PODSTATE_DIR"), os.Getenv("PODSTATE_START")
	observed, _ := strconv.ParseUint(os.Getenv("PODSTATE_OBSERVED"), 10, 64)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(start); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "start file never appeared:", start)
			return 1
		}
		time.Sleep(100 * time.Microsecond)
	}
	name := os.Getenv("PODSTATE_NAME")
	g, won, err := statevol.Announce(dir, observed, name, 42)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := statevol.WriteStatus(dir, statevol.Status{Container: name, State: contract.PhaseRunning, Generation: g.N, SupervisorPID: os.Getpid()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %v\n", g.N, won)
	return 0
}

// waitFor polls cond until it holds; the deadline only bounds a broken
// run, it is not what the test measures.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAnnounceSequence(t *testing.T) {
	dir := t.TempDir()
	if n, err := statevol.Current(dir); err != nil || n != 0 {
		t.Fatalf("fresh dir: %d %v", n, err)
	}
	g, won, err := statevol.Announce(dir, 0, "app", 42)
	if err != nil || !won || g.N != 1 || g.Source != "app" || g.ExitCode != 42 {
		t.Fatalf("first announcement: %+v %v %v", g, won, err)
	}
	// Another container that observed generation 0 is stale: its exit
	// belongs to the pod restart already announced.
	g, won, err = statevol.Announce(dir, 0, "side", 42)
	if err != nil || won || g.N != 1 || g.Source != "app" {
		t.Fatalf("stale announcement: %+v %v %v", g, won, err)
	}
	// After restarting into generation 1, a new exit makes generation 2.
	g, won, err = statevol.Announce(dir, 1, "side", 88)
	if err != nil || !won || g.N != 2 || g.Source != "side" || g.ExitCode != 88 {
		t.Fatalf("second pod restart: %+v %v %v", g, won, err)
	}
	if n, _ := statevol.Current(dir); n != 2 {
		t.Fatalf("current %d, want 2", n)
	}
	if g := statevol.ReadGeneration(dir, 1); g.Source != "app" || g.ExitCode != 42 || g.Time.IsZero() {
		t.Fatalf("generation 1 reads %+v", g)
	}
	// No temporary file is left.
	entries, _ := os.ReadDir(filepath.Join(dir, "pod-restarts"))
	if len(entries) != 2 {
		t.Fatalf("%d files in pod-restarts, want 2", len(entries))
	}
	if _, _, err := statevol.Announce(filepath.Join(dir, "absent"), 0, "app", 42); err == nil {
		t.Fatal("statevol.AnnounceWith into a missing state directory must fail")
	}
}

func TestAnnouncePrunesOldGenerations(t *testing.T) {
	dir := t.TempDir()
	for i := uint64(0); i < 30; i++ {
		if _, won, err := statevol.Announce(dir, i, "app", 42); err != nil || !won {
			t.Fatal(i, won, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "pod-restarts"))
	if len(entries) != statevol.GenKeep+1 {
		t.Fatalf("%d generation files left, want %d", len(entries), statevol.GenKeep+1)
	}
	if n, _ := statevol.Current(dir); n != 30 {
		t.Fatalf("current %d after pruning, want 30", n)
	}
	// An announcer far behind is stale although its generation's file was
	// pruned.
	if g, won, err := statevol.Announce(dir, 3, "slow", 42); err != nil || won || g.N != 30 {
		t.Fatalf("stale announcement after pruning: %+v %v %v", g, won, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pod-restarts", statevol.GenName(4))); err == nil {
		t.Fatal("a pruned generation was created again")
	}
}

func TestAnnounceConcurrentGoroutines(t *testing.T) {
	dir := t.TempDir()
	for round := uint64(0); round < 20; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := 0
		start := make(chan struct{})
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				g, won, err := statevol.Announce(dir, round, fmt.Sprint("c", i), 42)
				if err != nil || g.N != round+1 {
					t.Errorf("round %d: %+v %v", round, g, err)
				}
				if won {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, winners)
		}
	}
}

// runAnnouncers starts n processes that announce together with the given
// observed generation; prep, when not nil, may change the command of
// process i (later Env entries override earlier ones).
func runAnnouncers(t *testing.T, dir string, n int, observed uint64, prep func(i int, cmd *exec.Cmd)) []string {
	t.Helper()
	// The start file must be visible to announcers running as other users.
	sdir, err := os.MkdirTemp("", "podstate-start-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sdir)
	os.Chmod(sdir, 0o755)
	start := filepath.Join(sdir, "start")
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "PODSTATE_TEST_ROLE=statevol.AnnounceWith", "PODSTATE_DIR="+dir, "PODSTATE_START="+start,
			"PODSTATE_OBSERVED="+strconv.FormatUint(observed, 10), fmt.Sprintf("PODSTATE_NAME=c%d", i))
		if prep != nil {
			prep(i, cmd)
		}
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	os.WriteFile(start, nil, 0o644)
	var lines []string
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("announcer %d: %v: %s", i, err, outs[i])
		}
		lines = append(lines, strings.TrimSpace(outs[i].String()))
	}
	return lines
}

func checkOneWinner(t *testing.T, lines []string, gen uint64) {
	t.Helper()
	winners := 0
	for _, l := range lines {
		switch l {
		case fmt.Sprintf("%d true", gen):
			winners++
		case fmt.Sprintf("%d false", gen):
		default:
			t.Fatalf("announcer printed %q, want generation %d", l, gen)
		}
	}
	if winners != 1 {
		t.Fatalf("%d processes created generation %d, want exactly 1: %q", winners, gen, lines)
	}
}

// Separate processes hitting the rule during the same generation make one
// pod restart, round after round.
func TestAnnounceConcurrentProcesses(t *testing.T) {
	dir := t.TempDir()
	for round := uint64(0); round < 5; round++ {
		checkOneWinner(t, runAnnouncers(t, dir, 6, round, nil), round+1)
	}
	if n, _ := statevol.Current(dir); n != 5 {
		t.Fatalf("current %d, want 5", n)
	}
}

// Containers share only the volume: each announcer runs in its own mount
// namespace, where the shared directory is bind-mounted at another path.
func TestAnnounceAcrossMountNamespaces(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root and unshare(1) in CI")
		}
		t.Skip("needs root and unshare(1)")
	}
	shared := t.TempDir()
	exe, _ := filepath.Abs(os.Args[0])
	prep := func(i int, cmd *exec.Cmd) {
		mnt := filepath.Join(t.TempDir(), "run-restart-supervisor")
		os.Mkdir(mnt, 0o755)
		script := `mount --bind "$1" "$2" && shift 2 && exec "$@"`
		cmd.Path = unshare
		cmd.Args = []string{unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", shared, mnt, exe}
		cmd.Env = append(cmd.Env, "PODSTATE_DIR="+mnt)
	}
	for round := uint64(0); round < 3; round++ {
		checkOneWinner(t, runAnnouncers(t, shared, 4, round, prep), round+1)
	}
	if n, _ := statevol.Current(shared); n != 3 {
		t.Fatalf("current %d in the shared directory, want 3", n)
	}
}

func watchModes(t *testing.T, f func(t *testing.T, opts WatchOptions)) {
	t.Run("inotify", func(t *testing.T) { f(t, WatchOptions{}) })
	t.Run("poll", func(t *testing.T) { f(t, WatchOptions{ForcePoll: true, PollInterval: 20 * time.Millisecond}) })
}

func receive(t *testing.T, c <-chan statevol.Generation) statevol.Generation {
	t.Helper()
	select {
	case g := <-c:
		return g
	case <-time.After(30 * time.Second):
		t.Fatal("no generation delivered")
		return statevol.Generation{}
	}
}

func TestWatcherDeliversNewGenerationsOnly(t *testing.T) {
	watchModes(t, func(t *testing.T, opts WatchOptions) {
		dir := t.TempDir()
		statevol.Announce(dir, 0, "old", 1)
		statevol.Announce(dir, 1, "old", 1)
		from, _ := statevol.Current(dir)
		w, err := Watch(dir, from, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if w.Polling() != opts.ForcePoll {
			t.Fatalf("polling %v, want %v", w.Polling(), opts.ForcePoll)
		}
		// A process of another container announces.
		checkOneWinner(t, runAnnouncers(t, dir, 3, from, nil), from+1)
		g := receive(t, w.C())
		if g.N != 3 || !strings.HasPrefix(g.Source, "c") || g.ExitCode != 42 {
			t.Fatalf("delivered %+v, want generation 3 from a test announcer", g)
		}
		statevol.Announce(dir, 3, "app", 7)
		if g := receive(t, w.C()); g.N != 4 || g.Source != "app" {
			t.Fatalf("delivered %+v, want generation 4", g)
		}
		// Nothing old is replayed and nothing is delivered twice: the next
		// value on the channel is generation 5, not 1..4 again.
		statevol.Announce(dir, 4, "app", 7)
		if g := receive(t, w.C()); g.N != 5 {
			t.Fatalf("delivered %+v, want generation 5", g)
		}
	})
}

// A generation made between reading Current and starting the watch is
// still delivered.
func TestWatcherCatchesGenerationBeforeStart(t *testing.T) {
	watchModes(t, func(t *testing.T, opts WatchOptions) {
		dir := t.TempDir()
		from, _ := statevol.Current(dir)
		statevol.Announce(dir, from, "early", 42)
		w, err := Watch(dir, from, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if g := receive(t, w.C()); g.N != 1 || g.Source != "early" {
			t.Fatalf("delivered %+v", g)
		}
	})
}

// A receiver that is late gets the newest generation once, not a backlog.
func TestWatcherCoalescesForSlowReceiver(t *testing.T) {
	watchModes(t, func(t *testing.T, opts WatchOptions) {
		dir := t.TempDir()
		w, err := Watch(dir, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for i := uint64(0); i < 5; i++ {
			statevol.Announce(dir, i, "app", 42)
		}
		var last uint64
		for last != 5 {
			g := receive(t, w.C())
			if g.N <= last {
				t.Fatalf("generation %d delivered after %d", g.N, last)
			}
			last = g.N
		}
		select {
		case g := <-w.C():
			t.Fatalf("extra delivery %+v", g)
		default:
		}
	})
}

func TestWatchNeedsStateDir(t *testing.T) {
	if _, err := Watch(filepath.Join(t.TempDir(), "absent"), 0, WatchOptions{}); err == nil {
		t.Fatal("watching a missing state directory must fail")
	}
	w, err := Watch(t.TempDir(), 0, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.C(); ok {
		t.Fatal("C still open after Close")
	}
	w.Close() // twice is fine
}

func TestMemberExactlyOnce(t *testing.T) {
	watchModes(t, func(t *testing.T, opts WatchOptions) {
		dir := t.TempDir()
		statevol.Announce(dir, 0, "before", 42) // a pod restart before these containers started
		a, err := Join(dir, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := Join(dir, "b", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if a.Generation() != 1 || b.Generation() != 1 {
			t.Fatalf("joined at %d/%d, want 1", a.Generation(), b.Generation())
		}
		// Both workloads hit the rule in generation 1: one pod restart.
		ga, wonA, errA := a.Announce(42)
		gb, wonB, errB := b.Announce(42)
		if errA != nil || errB != nil || !wonA || wonB || ga.N != 2 || gb.N != 2 {
			t.Fatalf("a: %+v %v %v; b: %+v %v %v", ga, wonA, errA, gb, wonB, errB)
		}
		// Each already restarted for generation 2 after its own exit; the
		// watcher's delivery of it is not a second restart.
		for _, m := range []*Member{a, b} {
			g := receive(t, m.Restarts())
			if g.N != 2 || m.Accept(g) {
				t.Fatalf("generation %+v accepted twice", g)
			}
		}
		// A third container announces generation 3: both accept it once.
		statevol.Announce(dir, 2, "c", 42)
		for _, m := range []*Member{a, b} {
			g := receive(t, m.Restarts())
			if g.N != 3 || !m.Accept(g) || m.Accept(g) || m.Generation() != 3 {
				t.Fatalf("generation %+v: want accepted exactly once", g)
			}
		}
		if _, err := Join(dir, "", opts); err == nil {
			t.Fatal("empty container name accepted")
		}
	})
}

// readLines returns the lines of a file, none when it does not exist.
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// Containers of a pod may run as different users: each must be able to
// create the shared subdirectories, replace its own status document,
// announce, and read everybody's files.
func TestSharedAcrossUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root in CI")
		}
		t.Skip("needs root to run processes as other users")
	}
	// t.TempDir's parent is private: use a directory every user can enter.
	base, err := os.MkdirTemp("", "podstate-uids-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "podstate.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, data, 0o755)
	// An emptyDir's root is 0777.
	shared := filepath.Join(base, "state")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	prep := func(i int, cmd *exec.Cmd) {
		cmd.Path, cmd.Args = bin, []string{bin}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(1001 + i), Gid: uint32(1001 + i)}}
	}
	// All users start at once on a fresh directory, racing to create the
	// subdirectories; then twice more, replacing their documents.
	for round := uint64(0); round < 3; round++ {
		checkOneWinner(t, runAnnouncers(t, shared, 4, round, prep), round+1)
	}
	for _, sub := range []string{"status", "pod-restarts"} {
		fi, err := os.Stat(filepath.Join(shared, sub))
		if err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
			t.Fatalf("%s: %v %v", sub, fi.Mode(), err)
		}
	}
	st, err := statevol.ReadAll(shared)
	if err != nil || len(st) != 4 {
		t.Fatalf("statuses %+v: %v", st, err)
	}
	for i, s := range st {
		fi, _ := os.Stat(statevol.StatusPath(shared, s.Container))
		owner := fi.Sys().(*syscall.Stat_t).Uid
		if s.Generation != 3 || owner != uint32(1001+i) || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: generation %d, owner %d, mode %v", s.Container, s.Generation, owner, fi.Mode().Perm())
		}
	}
}
