package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Local image references. No registry is reachable, so every image the node
// runs is written here as a docker-archive and imported into containerd.
const (
	PauseImage   = "e2e.local/pause:1"
	BusyboxImage = "e2e.local/busybox:1"
	// BusyboxQuitImage is BusyboxImage with STOPSIGNAL SIGQUIT, as nginx's
	// image has: the runtime stops its containers with SIGQUIT.
	BusyboxQuitImage = "e2e.local/busybox-quit:1"
	SupervisorImage  = "e2e.local/restart-supervisor:e2e"
	// TrainingImage is Debian bookworm with python3-torch
	// (hack/training-rootfs.sh), for examples/training.
	TrainingImage = "e2e.local/training:1"
)

// tarFile is one entry of a single-layer image.
type tarFile struct {
	name     string
	mode     int64
	body     []byte
	linkname string // symlink target when non-empty
	dir      bool
}

func layerTar(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch, Uname: "root", Gname: "root"}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, strings.TrimSuffix(f.name, "/")+"/"
		case f.linkname != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.linkname
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.body); err != nil {
				return nil, err
			}
		}
	}
	return buf.Bytes(), tw.Close()
}

// writeImage writes a one-layer image as a docker-archive tarball at path.
func writeImage(path, ref string, files []tarFile, cfg v1.Config) error {
	data, err := layerTar(files)
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// goBuildStatic builds a Go main package of this module into out.
func goBuildStatic(repo, pkg, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// buildPauseImage: a static Go pause program as /pause.
func buildPauseImage(repo, dir string) (string, error) {
	bin := filepath.Join(dir, "pause")
	if err := goBuildStatic(repo, "./test/e2e/pause", bin); err != nil {
		return "", err
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pause.tar")
	return out, writeImage(out, PauseImage, []tarFile{{name: "pause", mode: 0o755, body: body}},
		v1.Config{Entrypoint: []string{"/pause"}})
}

// buildBusyboxImage: Debian's busybox-static with a symlink for each applet,
// plus /tmp, which the scenarios' shell snippets use.
func buildBusyboxImage(dir string) (string, error) {
	return buildBusybox(dir, BusyboxImage, "busybox.tar", "")
}

// buildBusyboxQuitImage: the same files, stopped with SIGQUIT.
func buildBusyboxQuitImage(dir string) (string, error) {
	return buildBusybox(dir, BusyboxQuitImage, "busybox-quit.tar", "SIGQUIT")
}

func buildBusybox(dir, ref, file, stopSignal string) (string, error) {
	const bb = "/bin/busybox"
	body, err := os.ReadFile(bb)
	if err != nil {
		return "", fmt.Errorf("busybox image: %w (install busybox-static)", err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("busybox --list: %w", err)
	}
	files := []tarFile{
		{name: "bin", dir: true, mode: 0o755},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "bin/busybox", mode: 0o755, body: body},
	}
	applets := strings.Fields(string(list))
	sort.Strings(applets)
	for _, a := range applets {
		if a != "busybox" && !strings.Contains(a, "/") {
			files = append(files, tarFile{name: "bin/" + a, mode: 0o777, linkname: "busybox"})
		}
	}
	out := filepath.Join(dir, file)
	return out, writeImage(out, ref, files, v1.Config{
		Cmd:        []string{"sh"},
		Env:        []string{"PATH=/bin"},
		StopSignal: stopSignal,
	})
}

// buildSupervisorImage mirrors Dockerfile.supervisor: FROM scratch, the
// static binaries /restart-supervisor and /restart-probe, USER 65532.
func buildSupervisorImage(repo, dir string) (string, error) {
	var files []tarFile
	for _, name := range []string{"restart-supervisor", "restart-probe"} {
		bin := filepath.Join(dir, name)
		if err := goBuildStatic(repo, "./cmd/"+name, bin); err != nil {
			return "", err
		}
		body, err := os.ReadFile(bin)
		if err != nil {
			return "", err
		}
		files = append(files, tarFile{name: name, mode: 0o755, body: body})
	}
	out := filepath.Join(dir, "restart-supervisor.tar")
	return out, writeImage(out, SupervisorImage, files,
		v1.Config{Entrypoint: []string{"/restart-supervisor"}, User: "65532"})
}

// BuildTrainingImage wraps the root filesystem tar that
// hack/training-rootfs.sh built into a one-layer docker-archive of
// TrainingImage at out. An out newer than rootfs is kept: compressing the
// 1 GB layer takes about a minute.
func BuildTrainingImage(rootfs, out string) error {
	src, err := os.Stat(rootfs)
	if err != nil {
		return fmt.Errorf("training image: %w", err)
	}
	if dst, err := os.Stat(out); err == nil && dst.Size() > 0 && dst.ModTime().After(src.ModTime()) {
		return nil
	}
	layer, err := tarball.LayerFromFile(rootfs, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("training image: layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("training image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("training image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Cmd: []string{"/usr/bin/python3"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("training image: %w", err)
	}
	tag, err := name.NewTag(TrainingImage)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("training image: %w", err)
	}
	return os.Rename(tmp, out)
}
