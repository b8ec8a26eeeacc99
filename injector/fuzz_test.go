package injector

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadManifests: the reader never panics, writing an untouched stream
// reproduces the input byte for byte, and injecting whatever it read never
// panics either (errors are fine).
func FuzzReadManifests(f *testing.F) {
	files, _ := filepath.Glob("testdata/in/*")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`{"kind":"Pod"} {"a":1}`))
	f.Add([]byte("a: [1\n"))
	f.Add([]byte("--- # c\nkind: List\napiVersion: v1\nitems: [1, {kind: Pod, apiVersion: v1}]\n"))
	inj := New(Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadManifests(data)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := m.WriteTo(&out); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("round trip changed the stream:\n%q\n%q", data, out.Bytes())
		}
		if _, err := inj.InjectManifests(context.Background(), m); err == nil {
			out.Reset()
			if _, err := m.WriteTo(&out); err != nil {
				t.Fatalf("WriteTo after inject: %v", err)
			}
		}
	})
}
