package yamledit

import (
	"testing"

	textyaml "go.yaml.in/yaml/v3"
)

func TestPaths(t *testing.T) {
	for p, want := range map[string]string{
		"/spec/containers/0/command":                           "spec.containers[0].command",
		"/metadata/annotations/restart-supervisor.dev~1status": "metadata.annotations[restart-supervisor.dev/status]",
		"/a~0b/1":  "a~b[1]",
		"no-slash": "no-slash",
	} {
		if got := FieldPath(p); got != want {
			t.Errorf("FieldPath(%q) = %q, want %q", p, got, want)
		}
	}
	if got := Dotted([]string{"spec", "replicatedJobs", "0", "template", "x.y"}); got != "spec.replicatedJobs[0].template.x.y" {
		t.Errorf("Dotted = %q", got)
	}
}

// TestOwnedPath: an edit through OwnedPath leaves the shared tree as it was.
func TestOwnedPath(t *testing.T) {
	var doc textyaml.Node
	if err := textyaml.Unmarshal([]byte("a:\n  b: [1, 2]\nc: &x {d: 1}\ne: *x\n"), &doc); err != nil {
		t.Fatal(err)
	}
	owned := map[*textyaml.Node]bool{}
	root := Own(owned, doc.Content[0])
	seq, err := OwnedPath(root, owned, "/a/b")
	if err != nil {
		t.Fatal(err)
	}
	seq.Content = seq.Content[:1]
	if orig, _ := NodeAt(doc.Content[0], "/a/b"); len(orig.Content) != 2 {
		t.Errorf("the shared tree changed: %d elements", len(orig.Content))
	}
	if got, _ := NodeAt(root, "/a/b"); len(got.Content) != 1 {
		t.Errorf("the edit is lost: %d elements", len(got.Content))
	}
	for _, p := range []string{"/c", "/e", "/a/b/2", "/a/x", "a"} {
		if _, err := OwnedPath(root, owned, p); err == nil {
			t.Errorf("OwnedPath(%q): no error", p)
		}
	}
	DeleteMember(root, "a")
	if Member(root, "a") != nil || Member(doc.Content[0], "a") == nil {
		t.Error("DeleteMember: wrong tree changed")
	}
}
