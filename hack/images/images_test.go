package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const caBundle = "-----BEGIN CERTIFICATE-----\n"

// inputs writes stand-ins of the cross-compiled binaries (a few bytes
// that differ per platform and per binary: the images' assembly is under
// test, not the Go toolchain's reproducibility) and a CA bundle.
func inputs(t *testing.T) Inputs {
	t.Helper()
	dir := t.TempDir()
	in := Inputs{
		BinDir:    filepath.Join(dir, "bin"),
		CABundle:  filepath.Join(dir, "ca.crt"),
		Version:   "v0.1.0",
		Source:    "https://github.com/restart-supervisor/restart-supervisor",
		Revision:  "9df1e34c5a323c4ef9b49b410783cef537b111b6",
		Created:   time.Unix(1796195690, 0).UTC(),
		Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}},
	}
	for _, p := range in.Platforms {
		for _, b := range []string{"restart-supervisor", "restart-probe", "restart-injector"} {
			path := filepath.Join(in.BinDir, p.OS+"_"+p.Architecture, b)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			// Written 0600 with a fresh mtime: the image must not care.
			if err := os.WriteFile(path, []byte(b+" for "+p.Architecture), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A symlink, as on distributions that keep the bundle elsewhere: the
	// image holds the file it names.
	if err := os.WriteFile(filepath.Join(dir, "tls-ca-bundle.pem"), []byte(caBundle), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tls-ca-bundle.pem", in.CABundle); err != nil {
		t.Fatal(err)
	}
	return in
}

func digests(built []Built) []string {
	var out []string
	for _, b := range built {
		out = append(out, b.Name+" "+b.Digest.String())
		for _, p := range b.Platforms {
			out = append(out, "  "+p.Platform+" "+p.Digest.String())
		}
	}
	return out
}

// Two builds of the same inputs, at different times and in different
// directories, give the same digests and the same layout index; another
// creation time gives others, so the timestamps are the build's input.
func TestBuildIsReproducible(t *testing.T) {
	in := inputs(t)
	a, err := Build(in, filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	// Touch the inputs: a rebuild rewrites them with new mtimes.
	later := time.Now().Add(time.Hour)
	filepath.Walk(in.BinDir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, later, later) })
	dirB := filepath.Join(t.TempDir(), "b")
	b, err := Build(in, dirB)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(digests(a), digests(b)) {
		t.Fatalf("two builds differ:\n%s\n--\n%s", strings.Join(digests(a), "\n"), strings.Join(digests(b), "\n"))
	}
	if len(a) != 2 || len(a[0].Platforms) != 2 || len(a[1].Platforms) != 2 {
		t.Fatalf("want 2 images of 2 platforms, got %v", digests(a))
	}
	in.Created = in.Created.Add(time.Second)
	c, err := Build(in, filepath.Join(t.TempDir(), "c"))
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Digest == a[0].Digest || c[1].Digest == a[1].Digest {
		t.Errorf("another creation time gave the same digest: %v", digests(c))
	}
	// Build replaces the layout: building into b again leaves one index
	// per image.
	if _, err := Build(in, dirB); err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(dirB, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(idx), annRefName); n != 2 {
		t.Errorf("layout index after a rebuild names %d images, want 2:\n%s", n, idx)
	}
}

// A binary missing for one platform is an error naming the image and the
// platform, not an image without it.
func TestBuildMissingBinary(t *testing.T) {
	in := inputs(t)
	os.Remove(filepath.Join(in.BinDir, "linux_arm64", "restart-probe"))
	_, err := Build(in, filepath.Join(t.TempDir(), "out"))
	if err == nil || !strings.Contains(err.Error(), "restart-supervisor linux/arm64") || !strings.Contains(err.Error(), "restart-probe") {
		t.Fatalf("got %v, want an error naming restart-supervisor linux/arm64 and restart-probe", err)
	}
}

// want is what each image must be, as its Dockerfile builds it.
var want = map[string]struct {
	entrypoint, cmd []string
	ports           []string
	files           map[string]int64 // path: mode
}{
	"restart-supervisor": {entrypoint: []string{"/restart-supervisor"},
		files: map[string]int64{"restart-supervisor": 0o755, "restart-probe": 0o755}},
	"restart-injector": {entrypoint: []string{"/restart-injector"}, cmd: []string{"serve"}, ports: []string{"8081/tcp", "8443/tcp"},
		files: map[string]int64{"etc/": 0o755, "etc/ssl/": 0o755, "etc/ssl/certs/": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "restart-injector": 0o755}},
}

// images build, then images push --insecure (what make images and make push
// INSECURE=1 run) to a registry on loopback, read
// back from it: both platforms, the entrypoint, the user, the labels and
// annotations, the files of the layer, and the printed references pin
// exactly what was built.
func TestBuildAndPush(t *testing.T) {
	in := inputs(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://") // 127.0.0.1:PORT

	dir := filepath.Join(t.TempDir(), "images")
	var out, errb bytes.Buffer
	args := []string{"build", "--bin", in.BinDir, "--ca-bundle", in.CABundle, "--version", in.Version,
		"--revision", in.Revision, "--created", "1796195690", "--out", dir}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("build: exit %d: %s", code, errb.String())
	}
	built := map[string]string{} // name: index digest, from build's output
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, " ") {
			built[strings.TrimSuffix(f[0], ":"+in.Version)] = f[1]
		}
	}
	if len(built) != 2 {
		t.Fatalf("build printed %q, want one index digest per image", out.String())
	}

	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"push", "--layout", dir, "--registry", host + "/team", "--insecure"}, &out, &errb); code != 0 {
		t.Fatalf("push: exit %d: %s", code, errb.String())
	}
	pinned := strings.Fields(out.String())
	if len(pinned) != 2 {
		t.Fatalf("push printed %q, want two references", out.String())
	}
	for _, p := range pinned {
		repo, digest, ok := strings.Cut(p, "@")
		img := strings.TrimPrefix(repo, host+"/team/")
		if !ok || built[img] != digest {
			t.Errorf("push printed %q; build printed %s for %s", p, built[img], img)
		}
		ref, err := name.ParseReference(p, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		checkPushed(t, ref, img, in)
		// The tag names the same index.
		tagged, err := remote.Head(ref.Context().Tag(in.Version))
		if err != nil || tagged.Digest.String() != digest {
			t.Errorf("%s:%s: %v, digest %v, want %s", repo, in.Version, err, tagged, digest)
		}
	}
}

func checkPushed(t *testing.T, ref name.Reference, img string, in Inputs) {
	t.Helper()
	w := want[img]
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		annVersion: "v0.1.0", annRevision: in.Revision, annSource: in.Source,
		annCreated: "2026-12-02T07:14:50Z", annTitle: img,
	}
	hasLabels := func(what string, got map[string]string) {
		for k, v := range wantLabels {
			if got[k] != v {
				t.Errorf("%s %s: %s = %q, want %q", img, what, k, got[k], v)
			}
		}
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("%s: media type %s", img, im.MediaType)
	}
	hasLabels("index annotations", im.Annotations)
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		image, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != d.Platform.String() {
			t.Errorf("%s %s: config says %s/%s", img, d.Platform, cf.OS, cf.Architecture)
		}
		if !reflect.DeepEqual(cf.Config.Entrypoint, w.entrypoint) || !reflect.DeepEqual(cf.Config.Cmd, w.cmd) {
			t.Errorf("%s %s: entrypoint %q cmd %q, want %q %q", img, d.Platform, cf.Config.Entrypoint, cf.Config.Cmd, w.entrypoint, w.cmd)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s %s: user %q, want 65532:65532", img, d.Platform, cf.Config.User)
		}
		var ports []string
		for p := range cf.Config.ExposedPorts {
			ports = append(ports, p)
		}
		if len(ports) > 1 && ports[0] > ports[1] {
			ports[0], ports[1] = ports[1], ports[0]
		}
		if !reflect.DeepEqual(ports, w.ports) {
			t.Errorf("%s %s: ports %v, want %v", img, d.Platform, ports, w.ports)
		}
		if !cf.Created.Equal(in.Created) {
			t.Errorf("%s %s: created %v, want %v", img, d.Platform, cf.Created, in.Created)
		}
		hasLabels(d.Platform.String()+" labels", cf.Config.Labels)
		m, err := image.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		hasLabels(d.Platform.String()+" manifest annotations", m.Annotations)
		if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
			t.Errorf("%s %s: manifest %s, config %s, layers %v: want OCI media types, one layer", img, d.Platform, m.MediaType, m.Config.MediaType, m.Layers)
		}
		checkLayer(t, image, img, d.Platform, w.files, in)
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("%s: platforms %v", img, platforms)
	}
}

// checkLayer reads the one layer: exactly the files of the Dockerfile,
// root-owned, with their modes, the creation time and the platform's
// binary.
func checkLayer(t *testing.T, image v1.Image, img string, p *v1.Platform, files map[string]int64, in Inputs) {
	t.Helper()
	layers, err := image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h.Mode
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(in.Created) {
			t.Errorf("%s %s: %s: uid %d gid %d mtime %v", img, p, h.Name, h.Uid, h.Gid, h.ModTime)
		}
		if h.Name == "etc/ssl/certs/ca-certificates.crt" {
			if b, _ := io.ReadAll(tr); h.Typeflag != tar.TypeReg || string(b) != caBundle {
				t.Errorf("%s %s: %s: type %c, %q, want the bundle", img, p, h.Name, h.Typeflag, b)
			}
		}
		if h.Typeflag == tar.TypeReg && strings.HasPrefix(h.Name, "restart-") {
			b, _ := io.ReadAll(tr)
			if want := h.Name + " for " + p.Architecture; string(b) != want {
				t.Errorf("%s %s: /%s holds %q, want %q", img, p, h.Name, b, want)
			}
		}
	}
	if !reflect.DeepEqual(seen, files) {
		t.Errorf("%s %s: layer holds %v, want %v", img, p, seen, files)
	}
}

// Usage errors are one line and exit 2 or 1, before anything is written.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage:"},
		{[]string{"build", "--created", "yesterday", "--bin", "x", "--version", "v", "--revision", "r", "--out", "o"}, 1, `--created: "yesterday" is not Unix seconds`},
		{[]string{"build", "--created", "0", "--bin", "x", "--version", "v", "--revision", "r"}, 1, "--out is required"},
		{[]string{"build", "--created", "0", "--bin", "x", "--version", "v", "--revision", "r", "--out", "o", "--platforms", "linux"}, 1, `--platforms: "linux" is not OS/ARCH`},
		{[]string{"push", "--layout", "x"}, 1, "--layout and --registry are required"},
		{[]string{"push", "--layout", t.TempDir(), "--registry", "r.test/p"}, 1, "images push:"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
