package manifests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/injector"
)

// FuzzReadManifests: the reader never panics, writing an untouched stream
// reproduces the input byte for byte, injecting whatever it read never
// panics either (errors are fine), and what inject wrote uninject takes
// back.
func FuzzReadManifests(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "in", "*"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`{"kind":"Pod"} {"a":1}`))
	f.Add([]byte("a: [1\n"))
	f.Add([]byte("--- # c\nkind: List\napiVersion: v1\nitems: [1, {kind: Pod, apiVersion: v1}]\n"))
	inj := injector.New(injector.Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _ := ReadManifests(data)
		if m == nil {
			return
		}
		// Documents that cannot be read are kept as they were: the
		// stream still round-trips.
		var out bytes.Buffer
		if _, err := m.WriteTo(&out); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("round trip changed the stream:\n%q\n%q", data, out.Bytes())
		}
		if _, err := Inject(context.Background(), inj, m); err == nil {
			out.Reset()
			if _, err := m.WriteTo(&out); err != nil {
				t.Fatalf("WriteTo after inject: %v", err)
			}
			// What inject wrote, uninject takes back without an error.
			back, _ := ReadManifests(out.Bytes())
			if back != nil {
				if _, err := UninjectManifests(back); err != nil {
					t.Fatalf("uninject of the injected stream: %v", err)
				}
			}
		}
	})
}
