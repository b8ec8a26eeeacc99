package podstate

import (
	"testing"

	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// BenchmarkRecorderUpdate is what a restart costs the supervising loop for
// its status document: the write itself happens on another goroutine.
func BenchmarkRecorderUpdate(b *testing.B) {
	r, err := NewRecorder(b.TempDir(), statevol.Status{Container: "app"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rule := 0
	for i := 0; b.Loop(); i++ {
		r.Update(func(s *statevol.Status) {
			s.Restarts = i
			s.LastExit = &statevol.Exit{Code: 42, Rule: &rule, Action: rules.ActionRestart}
		})
	}
}
