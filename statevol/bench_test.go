package statevol

import "testing"

// BenchmarkWriteStatus is one synchronous, synced status write.
func BenchmarkWriteStatus(b *testing.B) {
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		if err := WriteStatus(dir, Status{Container: "app", Restarts: i}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnounce is one pod restart announcement (a synced file and a
// link) plus the pruning that follows.
func BenchmarkAnnounce(b *testing.B) {
	dir := b.TempDir()
	var gen uint64
	for b.Loop() {
		g, won, err := Announce(dir, gen, "app", 42)
		if err != nil || !won {
			b.Fatal(err, won)
		}
		gen = g.N
	}
}
