package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// layoutDigests reads the digest of each image index of the OCI layout
// make images wrote, by its ref.name (<image>:<version>).
func layoutDigests(layout string) (map[string]string, error) {
	raw, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("%s is no OCI layout (run make images): %w", layout, err)
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s/index.json: %w", layout, err)
	}
	out := map[string]string{}
	for _, m := range idx.Manifests {
		if ref := m.Annotations["org.opencontainers.image.ref.name"]; ref != "" && strings.HasPrefix(m.Digest, "sha256:") {
			out[ref] = m.Digest
		}
	}
	return out, nil
}

// runChart copies the chart and pins the release's images in its values
// by digest (image.digest, supervisorImage.digest), so that the packaged
// chart installs exactly the images this release built, whatever a tag
// later names; the values' comments and order are kept.
func runChart(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("chart", flag.ContinueOnError)
	chart := fset.String("chart", "", "the chart's directory")
	layout := fset.String("layout", "", "the OCI layout of make images")
	version := fset.String("version", "", "the release's version (the images' tag)")
	out := fset.String("out", "", "directory to copy the chart into")
	if err := flags(fset, args, "chart", "layout", "version", "out"); err != nil {
		return err
	}
	digests, err := layoutDigests(*layout)
	if err != nil {
		return err
	}
	pins := map[string]string{"image": "restart-injector", "supervisorImage": "restart-supervisor"}
	for key, image := range pins {
		d, ok := digests[image+":"+*version]
		if !ok {
			return fmt.Errorf("the layout has no %s:%s (make images VERSION=%s)", image, *version, *version)
		}
		pins[key] = d
	}
	dst := filepath.Join(*out, filepath.Base(filepath.Clean(*chart)))
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := copyTree(*chart, dst); err != nil {
		return err
	}
	valuesPath := filepath.Join(dst, "values.yaml")
	raw, err := os.ReadFile(valuesPath)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", valuesPath, err)
	}
	for key, digest := range pins {
		if err := setDigest(&doc, key, digest); err != nil {
			return fmt.Errorf("%s: %w", valuesPath, err)
		}
	}
	edited, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(valuesPath, edited, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, dst)
	return nil
}

// setDigest sets the scalar <key>.digest of the values document.
func setDigest(doc *yaml.Node, key, digest string) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("not a mapping")
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != key || top.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		m := top.Content[i+1]
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == "digest" && m.Content[j+1].Kind == yaml.ScalarNode {
				m.Content[j+1].Value, m.Content[j+1].Tag, m.Content[j+1].Style = digest, "!!str", 0
				return nil
			}
		}
	}
	return fmt.Errorf("no %s.digest", key)
}

// copyTree copies the regular files and directories below src to dst; a
// link or a special file is an error.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// runSBOM writes the SPDX document of an image: the binaries of every
// platform it was built for (named OS_ARCH/binary).
func runSBOM(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("sbom", flag.ContinueOnError)
	name := fset.String("name", "", "what the document describes, e.g. restart-supervisor image")
	version := fset.String("version", "", "the release's version")
	created := fset.String("created", "", "SOURCE_DATE_EPOCH")
	out := fset.String("out", "", "the document to write")
	if err := flagsAndArgs(fset, args, "name", "version", "created", "out"); err != nil {
		return err
	}
	if fset.NArg() == 0 {
		return fmt.Errorf("%w: no binaries", errUsage)
	}
	when, err := parseEpoch(*created)
	if err != nil {
		return err
	}
	nameOf := func(p string) string { return filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p) }
	doc, err := spdxFor(*name, *version, fset.Args(), nameOf, when)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, filepath.Base(*out))
	return nil
}
