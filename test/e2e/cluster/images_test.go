package cluster

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBusyboxImage reads the docker-archive back: the tag containerd will
// import it under, a linux config with PATH, and a shell that resolves to
// the busybox binary.
func TestBusyboxImage(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("busybox-static is not installed")
		}
		t.Skip("busybox-static is not installed (skipped outside CI)")
	}
	dir := t.TempDir()
	path, err := buildBusyboxImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(BusyboxImage)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || len(cf.Config.Env) == 0 || cf.Config.Env[0] != "PATH=/bin" {
		t.Fatalf("config: os %q env %v", cf.OS, cf.Config.Env)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[filepath.Clean(h.Name)] = h
	}
	bb, sh := entries["bin/busybox"], entries["bin/sh"]
	if bb == nil || bb.Typeflag != tar.TypeReg || bb.Mode&0o111 == 0 {
		t.Fatalf("bin/busybox: %+v", bb)
	}
	if sh == nil || sh.Typeflag != tar.TypeSymlink || sh.Linkname != "busybox" {
		t.Fatalf("bin/sh: %+v", sh)
	}
	if tmp := entries["tmp"]; tmp == nil || tmp.Mode&0o1777 != 0o1777 {
		t.Fatalf("tmp: %+v", tmp)
	}
}
