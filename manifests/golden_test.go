package manifests

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

var update = flag.Bool("update", false, "rewrite ../injector/testdata/out from the current output")

// goldenDir holds the golden manifests: the injector's corpus of rule
// carriers (its own tests read the inputs as pods), injected here through
// the manifest path and compared with out/.
const goldenDir = "../injector/testdata"

// goldenInjector injects with the registry of testregistry.SeedGoldenImages
// and its pull secrets.
func goldenInjector(t testing.TB) (*injector.Injector, *testregistry.Registry) {
	tr := testregistry.New(t)
	testregistry.SeedGoldenImages(t, tr)
	res := registry.New(registry.Options{Transport: tr.Transport, PullSecrets: testregistry.GoldenPullSecrets})
	return injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:golden", Resolver: res}), tr
}

func injectBytes(t testing.TB, inj *injector.Injector, in []byte) ([]byte, []ObjectReport) {
	t.Helper()
	return injectBytesCtx(context.Background(), t, inj, in)
}

func injectBytesCtx(ctx context.Context, t testing.TB, inj *injector.Injector, in []byte) ([]byte, []ObjectReport) {
	t.Helper()
	m, err := ReadManifests(in)
	if err != nil {
		t.Fatalf("ReadManifests: %v", err)
	}
	reports, err := Inject(ctx, inj, m)
	if err != nil {
		t.Fatalf("InjectManifests: %v", err)
	}
	var out bytes.Buffer
	if _, err := m.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), reports
}

func goldenInputs(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(goldenDir, "in", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	return files
}

// TestGolden runs every manifest in ../injector/testdata/in through the offline path
// and compares with ../injector/testdata/out; run with -update to accept new output.
// Injecting the output again must change nothing.
func TestGolden(t *testing.T) {
	inj, _ := goldenInjector(t)
	for _, in := range goldenInputs(t) {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := injectBytes(t, inj, src)
			want := filepath.Join(goldenDir, "out", name)
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			exp, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, exp) {
				t.Errorf("output differs from %s (go test ./injector -run TestGolden -update to accept):\n%s", want, lineDiff(string(exp), string(got)))
			}
			again, reports := injectBytes(t, inj, got)
			if !bytes.Equal(again, got) {
				t.Errorf("second injection changed the output:\n%s", lineDiff(string(got), string(again)))
			}
			for _, r := range reports {
				if r.Injected {
					t.Errorf("second injection reports %s as injected", r.Object)
				}
			}
		})
	}
}

// lineDiff shows the first differing lines, enough to locate a change.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "line "+strconv.Itoa(i+1)+":\n- "+x+"\n+ "+y)
			if len(out) == 5 {
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
