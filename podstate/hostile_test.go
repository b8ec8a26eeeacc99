package podstate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// Another container forges a generation naming this container as its
// source just before this container announces: the announcement checks
// the forged file while it holds the member's lock, and must not wait on
// that lock itself (it did: the supervising goroutine blocked for good,
// and with it every signal, the stop included).
func TestAnnounceOverAForgedOwnGenerationReturns(t *testing.T) {
	dir := t.TempDir()
	members := []contract.PodMember{{Name: "app", Kind: contract.MemberRegular}, {Name: "other", Kind: contract.MemberRegular}}
	p, err := OpenMember(dir, "app", members, WatchOptions{ForcePoll: true}, supervise.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(supervise.State{Phase: contract.PhaseExited})
	gdir, err := statevol.GenerationsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gdir, statevol.GenName(1)), []byte(`{"n":1,"source":"app","exitCode":42}`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := testutil.Within(t, 5*time.Second, func() statevol.Generation {
		g, _, err := p.member.Announce(42)
		if err != nil {
			t.Errorf("statevol.AnnounceWith: %v", err)
		}
		return g
	})
	if g.N != 2 {
		t.Fatalf("announced generation %d; want 2, past the forged one", g.N)
	}
}
