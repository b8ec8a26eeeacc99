package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The krew plugin manifest of the CLI (krew's index format,
// krew.googlecontainertools.github.com/v1alpha2 Plugin): one platform per
// CLI archive, each with its download URL and SHA-256, so that
// `kubectl krew install --manifest=restarts.krew.yaml` (or the index,
// once submitted) installs the CLI as `kubectl restarts`.
type krewPlugin struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   krewMetadata `yaml:"metadata"`
	Spec       krewSpec     `yaml:"spec"`
}

type krewMetadata struct {
	Name string `yaml:"name"`
}

type krewSpec struct {
	Version          string         `yaml:"version"`
	Homepage         string         `yaml:"homepage"`
	ShortDescription string         `yaml:"shortDescription"`
	Description      string         `yaml:"description"`
	Platforms        []krewPlatform `yaml:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `yaml:"selector"`
	URI      string       `yaml:"uri"`
	SHA256   string       `yaml:"sha256"`
	Bin      string       `yaml:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

// semver is krew's rule for spec.version: v and a semantic version.
var semver = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func runKrew(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("krew", flag.ContinueOnError)
	dist := fs.String("dist", "", "directory holding the CLI archives; the manifest is written there")
	version := fs.String("version", "", "the release's version (vMAJOR.MINOR.PATCH)")
	url := fs.String("url", "", "where the release's files are downloaded from")
	if err := flags(fs, args, "dist", "version", "url"); err != nil {
		return err
	}
	if !semver.MatchString(*version) {
		return fmt.Errorf("%w: --version %q is not vMAJOR.MINOR.PATCH, which krew requires", errUsage, *version)
	}
	p := krewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin", Metadata: krewMetadata{Name: "restarts"},
		Spec: krewSpec{Version: *version, Homepage: "https://github.com/restart-supervisor/restart-supervisor",
			ShortDescription: "Container restart rules (KEP-5307) on any cluster",
			Description: "Checks an install of restart-supervisor (check), explains what a pod's restart rules do on this\n" +
				"cluster (explain), shows the in-place restarts the node agents recorded (status), and injects the\n" +
				"supervisor into manifests offline (inject).\n"}}
	prefix := "restart-injector_" + *version + "_"
	entries, err := os.ReadDir(*dist)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		platform, ok := strings.CutPrefix(name, prefix)
		if !ok || !strings.HasSuffix(name, ".tar.gz") {
			continue
		}
		goos, goarch, ok := strings.Cut(strings.TrimSuffix(platform, ".tar.gz"), "_")
		if !ok {
			continue
		}
		sum, err := fileSHA256(filepath.Join(*dist, name))
		if err != nil {
			return err
		}
		p.Spec.Platforms = append(p.Spec.Platforms, krewPlatform{Selector: krewSelector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			URI: strings.TrimSuffix(*url, "/") + "/" + name, SHA256: sum, Bin: "restart-injector" + exeSuffix(goos)})
	}
	if len(p.Spec.Platforms) == 0 {
		return fmt.Errorf("no %s*.tar.gz in %s", prefix, *dist)
	}
	out, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dist, "restarts.krew.yaml"), out, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "restarts.krew.yaml")
	return nil
}

func runChecksums(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("checksums", flag.ContinueOnError)
	dist := fs.String("dist", "", "directory whose files are summed into its SHA256SUMS")
	if err := flags(fs, args, "dist"); err != nil {
		return err
	}
	entries, err := os.ReadDir(*dist)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "SHA256SUMS" {
			continue
		}
		f, err := os.Open(filepath.Join(*dist, e.Name()))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		// sha256sum's format: `sha256sum -c SHA256SUMS` checks it.
		lines = append(lines, hex.EncodeToString(h.Sum(nil))+"  "+e.Name())
	}
	if len(lines) == 0 {
		return fmt.Errorf("no files in %s", *dist)
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	if err := os.WriteFile(filepath.Join(*dist, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "SHA256SUMS")
	return nil
}
