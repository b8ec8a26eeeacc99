package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// archiveSets are the archives a platform gets: the CLI everywhere, the
// supervisor and its probe where they run (Linux). A binary that was not
// built for a platform leaves its archive out.
var archiveSets = []struct {
	name     string
	binaries []string
}{
	{"restart-injector", []string{"restart-injector"}},
	{"restart-supervisor", []string{"restart-supervisor", "restart-probe"}},
}

func runArchives(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("archives", flag.ContinueOnError)
	bin := fs.String("bin", "", "directory of OS_ARCH/ directories of built binaries")
	version := fs.String("version", "", "the release's version")
	created := fs.String("created", "", "SOURCE_DATE_EPOCH: every timestamp")
	out := fs.String("out", "", "directory to write the archives and their SPDX documents into")
	if err := flags(fs, args, "bin", "version", "created", "out"); err != nil {
		return err
	}
	when, err := parseEpoch(*created)
	if err != nil {
		return err
	}
	platforms, err := os.ReadDir(*bin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	made := 0
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p.Name(), "_")
		if !p.IsDir() || !ok {
			continue
		}
		for _, set := range archiveSets {
			var files []string
			for _, b := range set.binaries {
				b += exeSuffix(goos)
				if _, err := os.Stat(filepath.Join(*bin, p.Name(), b)); err == nil {
					files = append(files, filepath.Join(*bin, p.Name(), b))
				}
			}
			if len(files) != len(set.binaries) {
				continue
			}
			name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", set.name, *version, goos, goarch)
			if err := writeArchive(filepath.Join(*out, name), files, when); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			doc, err := spdxFor(name, *version, files, filepath.Base, when)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := os.WriteFile(filepath.Join(*out, name+".spdx.json"), doc, 0o644); err != nil {
				return err
			}
			fmt.Fprintln(stdout, name)
			made++
		}
	}
	if made == 0 {
		return fmt.Errorf("no binaries under %s (want OS_ARCH/restart-injector, ...)", *bin)
	}
	return nil
}

// exeSuffix is what a binary's name ends with on goos: ".exe" on Windows,
// where go build writes restart-injector.exe and a shell runs nothing else.
func exeSuffix(goos string) string {
	if goos == "windows" {
		return ".exe"
	}
	return ""
}

// writeArchive writes files (flat, by base name, in name order) into a
// gzip-compressed tar at path, every entry 0755, owned by 0:0, stamped
// when, and the gzip header without a name or a time of its own: the same
// binaries give the same bytes.
func writeArchive(path string, files []string, when time.Time) error {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	gz.ModTime = when
	tw := tar.NewWriter(gz)
	for _, src := range files {
		if err := addFile(tw, src, filepath.Base(src), 0o755, when); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

// parseEpoch reads --created, SOURCE_DATE_EPOCH, as every timestamp.
func parseEpoch(created string) (time.Time, error) {
	epoch, err := strconv.ParseInt(created, 10, 64)
	if err != nil || epoch < 0 {
		return time.Time{}, fmt.Errorf("%w: --created %q is not a Unix time", errUsage, created)
	}
	return time.Unix(epoch, 0).UTC(), nil
}

// addFile writes the regular file src into tw as name, with mode, owned
// by 0:0 and stamped when; anything but a regular file is an error.
func addFile(tw *tar.Writer, src, name string, mode int64, when time.Time) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size(), ModTime: when, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, in)
	return err
}

// SPDX 2.3 (https://spdx.github.io/spdx-spec/v2.3/), the fields of a
// document, a package and a relationship this release fills in.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdxFor is the SPDX document of archive: each binary (named by nameOf,
// its SHA-256, its main module), and what its Go build information says it contains: the
// Go toolchain and every module, each with its version, its go.sum hash
// and its package URL.
func spdxFor(archive, version string, binaries []string, nameOf func(string) string, when time.Time) ([]byte, error) {
	doc := spdxDoc{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: archive,
		CreationInfo: spdxCreation{Created: when.Format(time.RFC3339), Creators: []string{"Tool: restart-supervisor hack/release"}}}
	seen := map[string]string{} // module path@version → SPDXID
	sum := sha256.New()
	for i, b := range binaries {
		info, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(b), err)
		}
		digest, err := fileSHA256(b)
		if err != nil {
			return nil, err
		}
		sum.Write([]byte(digest))
		id := fmt.Sprintf("SPDXRef-Binary-%d", i)
		doc.Packages = append(doc.Packages, spdxPackage{Name: nameOf(b), SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION",
			Checksums:    []spdxChecksum{{"SHA256", digest}},
			ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", fmt.Sprintf("pkg:golang/%s@%s", info.Main.Path, version)}},
			Comment:      "built by " + info.GoVersion + " from " + info.Path})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
		deps := []struct{ path, version, sum string }{{"stdlib", strings.TrimPrefix(info.GoVersion, "go"), ""}}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			deps = append(deps, struct{ path, version, sum string }{d.Path, d.Version, d.Sum})
		}
		for _, d := range deps {
			key := d.path + "@" + d.version
			depID, ok := seen[key]
			if !ok {
				depID = fmt.Sprintf("SPDXRef-Go-%d", len(seen))
				seen[key] = depID
				p := spdxPackage{Name: d.path, SPDXID: depID, VersionInfo: d.version, DownloadLocation: "NOASSERTION",
					ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", fmt.Sprintf("pkg:golang/%s@%s", d.path, d.version)}}}
				if d.sum != "" {
					p.Comment = "go.sum " + d.sum
				}
				doc.Packages = append(doc.Packages, p)
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{id, "DEPENDS_ON", depID})
		}
	}
	doc.DocumentNamespace = "https://github.com/restart-supervisor/restart-supervisor/spdx/" + archive + "-" + hex.EncodeToString(sum.Sum(nil))[:16]
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
