package main

import (
	"strings"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/spf13/pflag"
)

// registryList is a repeatable flag of registries (HOST[:PORT]), each value
// also comma-separated, normalized as image references name them.
type registryList []string

func (l *registryList) String() string { return strings.Join(*l, ",") }
func (l *registryList) Type() string   { return "registries" }

func (l *registryList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		n, err := registry.NormalizeRegistry(s)
		if err != nil {
			return err
		}
		*l = append(*l, n)
	}
	return nil
}

// registryFlags adds --insecure-registry and --allowed-registries to fs.
func registryFlags(fs *pflag.FlagSet, insecure, allowed *registryList) {
	fs.Var(insecure, "insecure-registry", "`HOST[:PORT]` of a registry that image lookups may reach over plain HTTP (repeatable); any other registry is reached over HTTPS only, localhost and private addresses included")
	if allowed != nil {
		fs.Var(allowed, "allowed-registries", "comma-separated `HOST[:PORT]`s: the only registries whose images are looked up (repeatable; default: any); an image elsewhere is refused without any request")
	}
}
