//go:build releaseverify

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestReleaseVerifies takes what `make release` wrote (RELEASE_DIST,
// default dist/) through the signing the release workflow does
// (.github/workflows/release.yaml), with a local key pair instead of the
// keyless identity and a registry on loopback instead of ghcr.io, and then
// verifies it with the commands docs/install.md gives a user: each image
// index's signature, its SBOM attestation (whose predicate must be the
// SBOM make release wrote), the checksums file's signature, and every
// file against the checksums. Each verification must also fail where it
// should: another key, an image nobody signed, a changed checksums file.
// COSIGN is the cosign binary (make release-verify builds it with
// hack/cosign.sh); `make release-verify` runs this test in a network
// namespace of its own, where nothing but its loopback exists, so that
// cosign can reach no transparency log or TUF mirror by accident.
func TestReleaseVerifies(t *testing.T) {
	cosign := os.Getenv("COSIGN")
	if cosign == "" {
		t.Fatal("COSIGN names no cosign binary: run make release-verify")
	}
	dist := os.Getenv("RELEASE_DIST")
	if dist == "" {
		dist = filepath.Join("..", "..", "dist")
	}
	for _, f := range []string{"images.tar", "SHA256SUMS", "restart-supervisor-image.spdx.json", "restart-injector-image.spdx.json"} {
		if _, err := os.Stat(filepath.Join(dist, f)); err != nil {
			t.Fatalf("%v: run make release first", err)
		}
	}
	home := t.TempDir()
	run := func(want bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(cosign, args...)
		cmd.Dir = home
		// No cache, no TUF root and no config of the machine's: the
		// key is all the trust there is.
		cmd.Env = []string{"HOME=" + home, "TUF_ROOT=" + filepath.Join(home, "tuf"), "COSIGN_PASSWORD=", "COSIGN_YES=true", "PATH=/usr/bin:/bin"}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if want && err != nil {
			t.Fatalf("cosign %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		if !want && err == nil {
			t.Fatalf("cosign %s succeeded, want it refused:\n%s%s", strings.Join(args, " "), out.String(), errb.String())
		}
		return out.String()
	}

	// The registry: go-containerregistry's, in memory, on loopback.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	images := pushLayout(t, filepath.Join(dist, "images.tar"), host)
	if len(images) != 2 {
		t.Fatalf("images.tar holds %d image indexes, want restart-supervisor's and restart-injector's", len(images))
	}

	run(true, "generate-key-pair", "--output-key-prefix", "release")
	run(true, "generate-key-pair", "--output-key-prefix", "other")
	insecure := []string{"--allow-http-registry", "--allow-insecure-registry"}
	noTlog := "--tlog-upload=false"
	for repo, digestRef := range images {
		sbom := filepath.Join(dist, repo+"-image.spdx.json")
		if repo == "restart-injector" {
			// Before it is signed, the injector's index verifies with
			// no key: an unsigned image is refused.
			run(false, append([]string{"verify", "--key", "release.pub", "--insecure-ignore-tlog"}, append(insecure, digestRef)...)...)
		}
		run(true, append([]string{"sign", "--key", "release.key", noTlog}, append(insecure, digestRef)...)...)
		run(true, append([]string{"attest", "--key", "release.key", noTlog, "--type", "spdxjson", "--predicate", sbom}, append(insecure, digestRef)...)...)

		out := run(true, append([]string{"verify", "--key", "release.pub", "--insecure-ignore-tlog", "--output", "json"}, append(insecure, digestRef)...)...)
		if !strings.Contains(out, strings.SplitN(digestRef, "@", 2)[1]) {
			t.Errorf("%s: the verified signature names another digest:\n%s", repo, out)
		}
		run(false, append([]string{"verify", "--key", "other.pub", "--insecure-ignore-tlog"}, append(insecure, digestRef)...)...)

		att := run(true, append([]string{"verify-attestation", "--key", "release.pub", "--insecure-ignore-tlog", "--type", "spdxjson"}, append(insecure, digestRef)...)...)
		want, err := os.ReadFile(sbom)
		if err != nil {
			t.Fatal(err)
		}
		if !attestedPredicateIs(t, att, want) {
			t.Errorf("%s: the attested SBOM is not %s", repo, sbom)
		}
		run(false, append([]string{"verify-attestation", "--key", "other.pub", "--insecure-ignore-tlog", "--type", "spdxjson"}, append(insecure, digestRef)...)...)
	}

	// The checksums file, signed as a blob; and every file it names.
	sums := filepath.Join(dist, "SHA256SUMS")
	bundle := filepath.Join(home, "SHA256SUMS.bundle")
	run(true, "sign-blob", "--key", "release.key", noTlog, "--bundle", bundle, sums)
	run(true, "verify-blob", "--key", "release.pub", "--insecure-ignore-tlog", "--bundle", bundle, sums)
	run(false, "verify-blob", "--key", "other.pub", "--insecure-ignore-tlog", "--bundle", bundle, sums)
	changed := filepath.Join(home, "SHA256SUMS")
	data, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(changed, append(data, []byte(strings.Repeat("0", 64)+"  evil.tar.gz\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	run(false, "verify-blob", "--key", "release.pub", "--insecure-ignore-tlog", "--bundle", bundle, changed)
	checkSums(t, dist, data)
}

// pushLayout pushes every image index of the OCI layout in the tar to
// host, each to the repository and tag of its ref.name annotation, and
// returns repository → host/repository@digest.
func pushLayout(t *testing.T, tarPath, host string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	untar(t, tarPath, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	man, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range man.Manifests {
		refName := d.Annotations["org.opencontainers.image.ref.name"]
		repo, tag, ok := strings.Cut(refName, ":")
		if !ok {
			t.Fatalf("index entry %s has no repository:tag ref.name (%q)", d.Digest, refName)
		}
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(host+"/"+repo+":"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(ref, child); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
		out[repo] = host + "/" + repo + "@" + d.Digest.String()
	}
	return out
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q leaves the directory", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			w, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			w.Close()
		default:
			t.Fatalf("%s: entry %q is neither a file nor a directory", path, h.Name)
		}
	}
}

// attestedPredicateIs reports whether one of the DSSE envelopes cosign
// verify-attestation printed (one JSON object a line) carries an in-toto
// statement whose predicate is the JSON document want.
func attestedPredicateIs(t *testing.T, out string, want []byte) bool {
	t.Helper()
	var wantDoc any
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(wantDoc)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var env struct {
			Payload string `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &env) != nil || env.Payload == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			continue
		}
		var st struct {
			PredicateType string `json:"predicateType"`
			Predicate     any    `json:"predicate"`
		}
		if json.Unmarshal(raw, &st) != nil {
			continue
		}
		got, _ := json.Marshal(st.Predicate)
		if st.PredicateType == "https://spdx.dev/Document" && bytes.Equal(got, wantJSON) {
			return true
		}
	}
	return false
}

// checkSums checks every line of SHA256SUMS against its file in dist, as
// `sha256sum -c SHA256SUMS` does, and that every file of dist is named.
func checkSums(t *testing.T, dist string, sums []byte) {
	t.Helper()
	named := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		data, err := os.ReadFile(filepath.Join(dist, file))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: sha256 %x, SHA256SUMS says %s", file, h, sum)
		}
		named[file] = true
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" && !named[e.Name()] {
			t.Errorf("%s is in the release but not in SHA256SUMS", e.Name())
		}
	}
}
