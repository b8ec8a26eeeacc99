package main

import (
	"fmt"
	"strings"
)

// outputFile is the -o flag of inject, uninject and compose: a file to write,
// as istioctl kube-inject's -o. kubectl users read -o as an output format, and
// `-o yaml` would otherwise write a file named yaml and print nothing; a value
// that is one of kubectl's formats is refused, a path such as ./yaml is not.
type outputFile string

// kubectlFormats are kubectl get's -o values, and the prefixes of those
// that take an argument (jsonpath=..., custom-columns=...).
var kubectlFormats = []string{"yaml", "json", "wide", "name", "go-template", "go-template-file", "jsonpath", "jsonpath-file", "jsonpath-as-json", "custom-columns", "custom-columns-file", "template", "templatefile"}

func (o *outputFile) String() string { return string(*o) }
func (o *outputFile) Type() string   { return "file" }

func (o *outputFile) Set(v string) error {
	name, _, _ := strings.Cut(v, "=")
	for _, f := range kubectlFormats {
		if name == f {
			return fmt.Errorf("-o names the file to write (as istioctl's -o), not a kubectl output format: the output keeps the input's YAML or JSON on stdout without -o; for a file named %s, write -o ./%s", v, v)
		}
	}
	*o = outputFile(v)
	return nil
}
