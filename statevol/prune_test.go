package statevol

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestPruneRemovesNothingThroughASwappedLink: a container of a pod puts a
// link to another pod's pod-restarts/ in place of its own, and back,
// over and over (renameat2 RENAME_EXCHANGE), while its old generation
// files are pruned, as the node agent prunes after each delivery. Not one
// of the other pod's files may go: every removal is relative to the
// descriptor the listing was read through. Bounded to 3000 prunes.
func TestPruneRemovesNothingThroughASwappedLink(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim", contract.PodRestartsDir)
	evil := filepath.Join(root, "evil")
	own := filepath.Join(evil, contract.PodRestartsDir)
	link := filepath.Join(evil, "link")
	for _, d := range []string{victim, own} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{GenName(1), GenName(2), GenName(3)}
	for _, n := range names {
		os.WriteFile(filepath.Join(victim, n), []byte("{}\n"), 0o644)
	}
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	// The attacker's own directory, whichever name it has at the moment.
	ownFD, err := unix.Open(own, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ownFD)
	stopSwapping := swapUntilStopped(own, link)
	lost := 0
	for i := 0; i < 3000 && lost == 0; i++ {
		for _, n := range names {
			if fd, err := unix.Openat(ownFD, n, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(fd)
			}
		}
		prune(own, 100)
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(victim, n)); err != nil {
				lost++
			}
		}
	}
	stopSwapping()
	if lost > 0 {
		t.Fatalf("%d of the other pod's %d files removed through the swapped link", lost, len(names))
	}
}

// TestGroupGenerationsReadNothingThroughASwappedLink: the same swap as
// TestPruneRemovesNothingThroughASwappedLink while the group generations
// of the pod are looked up (the node agent's DeliverGroup, LastGroup): the
// other pod's group generations, delivered by the agent, must never be
// taken for this pod's. Bounded to 3000 look-ups.
func TestGroupGenerationsReadNothingThroughASwappedLink(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	evil := filepath.Join(root, "evil")
	own := filepath.Join(evil, contract.PodRestartsDir)
	for _, d := range []string{filepath.Join(victim, contract.PodRestartsDir), own} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for n := uint64(1); n <= 3; n++ {
		os.WriteFile(filepath.Join(victim, contract.PodRestartsDir, GenName(n)),
			[]byte(`{"generation":`+GenName(n)[19:]+`,"source":"`+contract.GroupSource+`","group":{"generation":7}}`+"\n"), 0o644)
		os.WriteFile(filepath.Join(own, GenName(n)), []byte(`{"source":"a"}`+"\n"), 0o644)
	}
	if len(groupGenerations(victim)) == 0 {
		t.Fatal("the victim's own group generations are not read: the test shows nothing")
	}
	link := filepath.Join(evil, "link")
	if err := os.Symlink(filepath.Join(victim, contract.PodRestartsDir), link); err != nil {
		t.Fatal(err)
	}
	stopSwapping := swapUntilStopped(own, link)
	leaked := 0
	for i := 0; i < 3000 && leaked == 0; i++ {
		leaked = len(groupGenerations(evil))
	}
	stopSwapping()
	if leaked > 0 {
		t.Fatalf("%d of the other pod's group generations taken for this pod's through the swapped link", leaked)
	}
}

// swapUntilStopped exchanges the directory a and the link b
// (renameat2 RENAME_EXCHANGE) over and over, as a container of the pod
// can, until the returned function is called.
func swapUntilStopped(a, b string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			}
		}
	}()
	return func() { close(quit); <-done }
}
