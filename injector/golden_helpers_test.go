package injector

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

// The golden manifests of testdata/in are the corpus of rule carriers
// these tests read as pods; package manifests injects them through the
// offline path and compares with testdata/out.

// goldenInjector injects with the registry of testregistry.SeedGoldenImages
// and its pull secrets.
func goldenInjector(t testing.TB) (*Injector, *testregistry.Registry) {
	tr := testregistry.New(t)
	testregistry.SeedGoldenImages(t, tr)
	res := registry.New(registry.Options{Transport: tr.Transport, PullSecrets: testregistry.GoldenPullSecrets})
	return New(Options{SupervisorImage: "registry.test/restart-supervisor:golden", Resolver: res}), tr
}

func goldenInputs(t testing.TB) []string {
	files, err := filepath.Glob("testdata/in/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	return files
}

// readDocs decodes every non-empty document of a YAML or JSON stream as
// the API machinery does (numbers as int64 where they are whole).
func readDocs(t testing.TB, data []byte) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		js, err := kubeyaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			t.Fatal(err)
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
}
