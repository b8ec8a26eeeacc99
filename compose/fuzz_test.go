package compose

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"
)

// Any input: no panic, errors on one line, and what is written parses.
func FuzzGenerate(f *testing.F) {
	files, _ := filepath.Glob("testdata/in/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("services:\n  a: &a {image: demo/busybox, x-restart-rules: {restartPolicy: Never}}\n  b: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Generate(t.Context(), data, testOptions(nil))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		var v any
		if err := textyaml.Unmarshal(out, &v); err != nil {
			t.Fatalf("output does not parse: %v\n%s", err, out)
		}
	})
}
