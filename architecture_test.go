package restartsupervisor_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/restart-supervisor/restart-supervisor"

// The package table of ARCHITECTURE.md says what each package imports of
// this module (its last column): it must say exactly what the code
// imports, outside tests, so that the map a maintainer reads is the
// house as built. Rows whose imports are "anything" or "the packages
// above", and rows of more than one package or of no Go package, are
// not checked.
func TestArchitectureListsEachPackagesImports(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	actual := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		var own []string
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				own = append(own, rest)
			}
		}
		slices.Sort(own)
		actual[strings.TrimPrefix(p.ImportPath, module+"/")] = own
	}
	code := regexp.MustCompile("`([^`]+)`")
	checked := 0
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		first, last := cells[0], strings.TrimSpace(cells[len(cells)-1])
		names := code.FindAllStringSubmatch(first, -1)
		if len(names) != 1 || strings.Contains(first, "not Go") || strings.Contains(last, "anything") || strings.Contains(last, "the packages above") {
			continue
		}
		pkg := strings.TrimSuffix(names[0][1], "/")
		got, ok := actual[pkg]
		if !ok {
			t.Errorf("ARCHITECTURE.md lists %s, which is no package of the module", pkg)
			continue
		}
		var said []string
		if last != "none" {
			for _, m := range code.FindAllStringSubmatch(last, -1) {
				said = append(said, strings.TrimSuffix(m[1], "/"))
			}
		}
		slices.Sort(said)
		said = slices.Compact(said)
		if !slices.Equal(said, got) {
			t.Errorf("ARCHITECTURE.md: %s imports %v, the code %v", pkg, said, got)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d rows of ARCHITECTURE.md's package table checked: is the table still there?", checked)
	}
	t.Logf("%d packages' imports checked against ARCHITECTURE.md", checked)
}
