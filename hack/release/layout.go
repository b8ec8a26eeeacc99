package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// runLayout writes the OCI image layout the images were built into (make
// images: index.json, oci-layout, blobs/) as one uncompressed tar, the
// form `ctr -n k8s.io images import` and `kind load image-archive` take:
// entries in path order, 0644 files and 0755 directories of 0:0, stamped
// with SOURCE_DATE_EPOCH. A link or a special file in the layout is an
// error: the layout is made of regular files.
func runLayout(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("layout", flag.ContinueOnError)
	layout := fset.String("layout", "", "the OCI layout directory (make images: bin/images)")
	created := fset.String("created", "", "SOURCE_DATE_EPOCH: every timestamp")
	out := fset.String("out", "", "the tar to write")
	if err := flags(fset, args, "layout", "created", "out"); err != nil {
		return err
	}
	when, err := parseEpoch(*created)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*layout, "index.json")); err != nil {
		return fmt.Errorf("%s is no OCI layout (run make images): %w", *layout, err)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	// WalkDir visits in lexical order: the same layout gives the same tar.
	err = filepath.WalkDir(*layout, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == *layout {
			return err
		}
		rel, err := filepath.Rel(*layout, path)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: when, Format: tar.FormatPAX})
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", path)
		}
		return addFile(tw, path, filepath.ToSlash(rel), 0o644, when)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, filepath.Base(*out))
	return nil
}
