package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The release workflow (.github/workflows/release.yaml) does what
// docs/install.md says a release is: it runs on a version tag with the
// rights to publish and to sign keylessly, makes the files with the
// Makefile's release target, pushes and signs the images by digest, signs
// the checksums, pushes the chart as an OCI artifact and publishes the
// files; every make target it calls exists, every action it uses is
// pinned to a major version.
func TestReleaseWorkflow(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On struct {
			Push struct {
				Tags []string `yaml:"tags"`
			} `yaml:"push"`
		} `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			Steps []struct {
				Uses string `yaml:"uses"`
				Run  string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatal(err)
	}
	if strings.Join(wf.On.Push.Tags, ",") != "v*.*.*" {
		t.Errorf("runs on tags %v, want v*.*.*", wf.On.Push.Tags)
	}
	for perm, want := range map[string]string{"contents": "write", "packages": "write", "id-token": "write"} {
		if wf.Permissions[perm] != want {
			t.Errorf("permission %s: %q, want %q", perm, wf.Permissions[perm], want)
		}
	}
	if len(wf.Permissions) != 3 {
		t.Errorf("permissions %v: want only these three", wf.Permissions)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	var runs []string
	pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+@v\d+$`)
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			if s.Uses != "" && !pinned.MatchString(s.Uses) {
				t.Errorf("uses %q: want owner/action@vN", s.Uses)
			}
			runs = append(runs, s.Run)
		}
	}
	all := strings.Join(runs, "\n")
	for _, m := range regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`).FindAllStringSubmatch(all, -1) {
		if !targets[m[1]] {
			t.Errorf("the workflow runs make %s, which the Makefile has no target for", m[1])
		}
	}
	for _, want := range []string{"make release", "make push", "cosign sign --yes", "cosign attest --yes --type spdxjson", "-image.spdx.json", "cosign sign-blob --yes", "dist/SHA256SUMS",
		`push dist/restart-injector-*.tgz "oci://`, "gh release create"} {
		if !strings.Contains(all, want) {
			t.Errorf("no step runs %q", want)
		}
	}
	if i, j := strings.Index(all, "make release"), strings.Index(all, "cosign sign"); i > j {
		t.Error("signs before the files are made")
	}
}
