package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// binTree lays out a --bin directory as `make release` does, each binary a
// copy of this test binary (a real Go binary with build information).
func binTree(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for dir, names := range map[string][]string{
		"linux_amd64":   {"restart-injector", "restart-supervisor", "restart-probe"},
		"darwin_arm64":  {"restart-injector"},
		"windows_amd64": {"restart-injector.exe"},
	} {
		if err := os.MkdirAll(filepath.Join(bin, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(bin, dir, n), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bin
}

func runRelease(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// The archives: the CLI for each platform, the supervisor and its probe
// where they were built (Linux), each entry 0755 root:root stamped with
// SOURCE_DATE_EPOCH, and the same bytes from the same binaries.
func TestArchives(t *testing.T) {
	bin := binTree(t)
	var outs []string
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		if code, msg := runRelease(t, "archives", "--bin", bin, "--version", "v1.2.3", "--created", "1700000000", "--out", out); code != 0 {
			t.Fatalf("archives: %d %s", code, msg)
		}
		outs = append(outs, out)
	}
	want := map[string][]string{
		"restart-injector_v1.2.3_linux_amd64.tar.gz":   {"restart-injector"},
		"restart-injector_v1.2.3_darwin_arm64.tar.gz":  {"restart-injector"},
		"restart-injector_v1.2.3_windows_amd64.tar.gz": {"restart-injector.exe"},
		"restart-supervisor_v1.2.3_linux_amd64.tar.gz": {"restart-probe", "restart-supervisor"},
	}
	entries, _ := os.ReadDir(outs[0])
	if len(entries) != 2*len(want) {
		t.Errorf("%d files, want %d archives and their SPDX documents", len(entries), len(want))
	}
	for name, files := range want {
		a, err := os.ReadFile(filepath.Join(outs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(outs[1], name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs on the same binaries", name)
		}
		gz, err := gzip.NewReader(bytes.NewReader(a))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(gz)
		var got []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, h.Name)
			if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
				t.Errorf("%s/%s: mode %o uid %d gid %d time %s", name, h.Name, h.Mode, h.Uid, h.Gid, h.ModTime)
			}
		}
		if strings.Join(got, ",") != strings.Join(files, ",") {
			t.Errorf("%s holds %v, want %v", name, got, files)
		}
	}
}

// The SPDX document of an archive names each binary with its SHA-256 and
// every module its build information lists, with package URLs.
func TestSPDXFromBuildInfo(t *testing.T) {
	bin := binTree(t)
	out := t.TempDir()
	if code, msg := runRelease(t, "archives", "--bin", bin, "--version", "v1.2.3", "--created", "1700000000", "--out", out); code != 0 {
		t.Fatalf("archives: %d %s", code, msg)
	}
	raw, err := os.ReadFile(filepath.Join(out, "restart-supervisor_v1.2.3_linux_amd64.tar.gz.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	sum, _ := fileSHA256(filepath.Join(bin, "linux_amd64", "restart-supervisor"))
	var binaries int
	purls := map[string]bool{}
	for _, p := range doc.Packages {
		if p.Name == "restart-supervisor" && len(p.Checksums) == 1 && p.Checksums[0].Value == sum {
			binaries++
		}
		for _, r := range p.ExternalRefs {
			purls[strings.SplitN(r.Locator, "@", 2)[0]] = true
		}
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2023-11-14T22:13:20Z" || binaries != 1 {
		t.Errorf("document %s created %s, %d restart-supervisor packages with its checksum", doc.SPDXVersion, doc.CreationInfo.Created, binaries)
	}
	for _, want := range []string{"pkg:golang/stdlib", "pkg:golang/gopkg.in/yaml.v3"} {
		if !purls[want] {
			t.Errorf("no package %s among %d", want, len(purls))
		}
	}
	if len(doc.Relationships) < len(doc.Packages) {
		t.Errorf("%d relationships for %d packages", len(doc.Relationships), len(doc.Packages))
	}
}

// The krew manifest lists each CLI archive with its URL and SHA-256; the
// checksums cover every file and pass `sha256sum -c`.
func TestKrewAndChecksums(t *testing.T) {
	bin := binTree(t)
	dist := t.TempDir()
	if code, msg := runRelease(t, "archives", "--bin", bin, "--version", "v1.2.3", "--created", "0", "--out", dist); code != 0 {
		t.Fatalf("archives: %d %s", code, msg)
	}
	if code, msg := runRelease(t, "krew", "--dist", dist, "--version", "v1.2.3", "--url", "https://example.invalid/v1.2.3/"); code != 0 {
		t.Fatalf("krew: %d %s", code, msg)
	}
	raw, err := os.ReadFile(filepath.Join(dist, "restarts.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.Kind != "Plugin" || p.Metadata.Name != "restarts" || p.Spec.Version != "v1.2.3" || len(p.Spec.Platforms) != 3 {
		t.Fatalf("manifest %+v", p)
	}
	for _, pl := range p.Spec.Platforms {
		name := filepath.Base(pl.URI)
		sum, _ := fileSHA256(filepath.Join(dist, name))
		bin := "restart-injector"
		if pl.Selector.MatchLabels["os"] == "windows" {
			bin += ".exe"
		}
		if pl.SHA256 != sum || pl.URI != "https://example.invalid/v1.2.3/"+name || pl.Bin != bin ||
			name != "restart-injector_v1.2.3_"+pl.Selector.MatchLabels["os"]+"_"+pl.Selector.MatchLabels["arch"]+".tar.gz" {
			t.Errorf("platform %+v", pl)
		}
	}
	if code, msg := runRelease(t, "checksums", "--dist", dist); code != 0 {
		t.Fatalf("checksums: %d %s", code, msg)
	}
	sums, _ := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if n := strings.Count(string(sums), "\n"); n != 9 {
		t.Errorf("SHA256SUMS has %d lines, want 9 (4 archives, 4 documents, the manifest)", n)
	}
	check := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
}

// Bad input: a clear one-line error and exit 2 for usage, 1 for a failure;
// krew refuses a version it cannot take.
func TestReleaseBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"archives", "--bin", t.TempDir()}, 2, "--version is required"},
		{[]string{"archives", "--bin", t.TempDir(), "--version", "v1", "--created", "yesterday", "--out", t.TempDir()}, 2, "--created"},
		{[]string{"archives", "--bin", t.TempDir(), "--version", "v1", "--created", "0", "--out", t.TempDir()}, 1, "no binaries"},
		{[]string{"krew", "--dist", t.TempDir(), "--version", "b71c437-dirty", "--url", "https://example.invalid"}, 2, "vMAJOR.MINOR.PATCH"},
		{[]string{"checksums", "--dist", t.TempDir()}, 1, "no files"},
		{[]string{"sign"}, 2, "usage"},
	} {
		code, msg := runRelease(t, tc.args...)
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%v: exit %d %q, want %d and %q", tc.args, code, msg, tc.code, tc.msg)
		}
	}
}

// The layout's tar holds every file of the layout by its relative path,
// the same bytes twice; a link in the layout is refused.
func TestLayoutTar(t *testing.T) {
	layout := t.TempDir()
	for name, data := range map[string]string{"index.json": `{"schemaVersion":2}`, "oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "blobs/sha256/ab": "blob"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(layout, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(layout, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	var tars [][]byte
	for i := 0; i < 2; i++ {
		path := filepath.Join(out, "images.tar")
		if code, msg := runRelease(t, "layout", "--layout", layout, "--created", "0", "--out", path); code != 0 {
			t.Fatalf("layout: %d %s", code, msg)
		}
		b, _ := os.ReadFile(path)
		tars = append(tars, b)
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Error("two tars of one layout differ")
	}
	tr := tar.NewReader(bytes.NewReader(tars[0]))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "blobs/,blobs/sha256/,blobs/sha256/ab,index.json,oci-layout" {
		t.Errorf("entries %s", got)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(layout, "blobs", "sha256", "cd")); err != nil {
		t.Fatal(err)
	}
	if code, msg := runRelease(t, "layout", "--layout", layout, "--created", "0", "--out", filepath.Join(out, "x.tar")); code != 1 || !strings.Contains(msg, "not a regular file") {
		t.Errorf("a link in the layout: exit %d %q", code, msg)
	}
}

// The released chart is the repository's with both images pinned by the
// digests the layout holds for the release's version; every other value,
// and the values' comments, as they were. A layout without the version's
// images is refused.
func TestChartPinned(t *testing.T) {
	layout := t.TempDir()
	index := `{"schemaVersion":2,"manifests":[
 {"digest":"sha256:aaaa","annotations":{"org.opencontainers.image.ref.name":"restart-supervisor:v1.2.3"}},
 {"digest":"sha256:bbbb","annotations":{"org.opencontainers.image.ref.name":"restart-injector:v1.2.3"}}]}`
	if err := os.WriteFile(filepath.Join(layout, "index.json"), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join("..", "..", "charts", "restart-injector")
	out := t.TempDir()
	if code, msg := runRelease(t, "chart", "--chart", chart, "--layout", layout, "--version", "v1.2.3", "--out", out); code != 0 {
		t.Fatalf("chart: %d %s", code, msg)
	}
	read := func(path string) map[string]any {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	orig, pinned := read(filepath.Join(chart, "values.yaml")), read(filepath.Join(out, "restart-injector", "values.yaml"))
	if d := pinned["image"].(map[string]any)["digest"]; d != "sha256:bbbb" {
		t.Errorf("image.digest %v", d)
	}
	if d := pinned["supervisorImage"].(map[string]any)["digest"]; d != "sha256:aaaa" {
		t.Errorf("supervisorImage.digest %v", d)
	}
	pinned["image"].(map[string]any)["digest"], pinned["supervisorImage"].(map[string]any)["digest"] = "", ""
	a, _ := json.Marshal(orig)
	b, _ := json.Marshal(pinned)
	if !bytes.Equal(a, b) {
		t.Error("values other than the two digests changed")
	}
	raw, _ := os.ReadFile(filepath.Join(out, "restart-injector", "values.yaml"))
	if !strings.Contains(string(raw), "# The webhook's image; tag \"\" is the chart's appVersion.") {
		t.Error("the values' comments were lost")
	}
	for _, f := range []string{"Chart.yaml", "templates/deployment.yaml", "values.schema.json"} {
		if _, err := os.Stat(filepath.Join(out, "restart-injector", f)); err != nil {
			t.Errorf("the copy lacks %s: %v", f, err)
		}
	}
	if code, msg := runRelease(t, "chart", "--chart", chart, "--layout", layout, "--version", "v9.9.9", "--out", t.TempDir()); code != 1 || !strings.Contains(msg, "no restart-") {
		t.Errorf("another version's layout: exit %d %q", code, msg)
	}
}

// An image's SPDX document names each platform's binary by OS_ARCH/name.
func TestImageSBOM(t *testing.T) {
	bin := binTree(t)
	out := filepath.Join(t.TempDir(), "img.spdx.json")
	code, msg := runRelease(t, "sbom", "--name", "restart-supervisor image", "--version", "v1.2.3", "--created", "0", "--out", out,
		filepath.Join(bin, "linux_amd64", "restart-supervisor"), filepath.Join(bin, "linux_amd64", "restart-probe"))
	if code != 0 {
		t.Fatalf("sbom: %d %s", code, msg)
	}
	raw, _ := os.ReadFile(out)
	var doc spdxDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range doc.Packages {
		if len(p.Checksums) > 0 {
			names = append(names, p.Name)
		}
	}
	if doc.Name != "restart-supervisor image" || strings.Join(names, ",") != "linux_amd64/restart-supervisor,linux_amd64/restart-probe" {
		t.Errorf("document %q, binaries %v", doc.Name, names)
	}
	if code, _ := runRelease(t, "sbom", "--name", "x", "--version", "v1", "--created", "0", "--out", out); code != 2 {
		t.Errorf("no binaries: exit %d, want 2", code)
	}
}
