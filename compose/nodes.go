package compose

import (
	"errors"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	textyaml "go.yaml.in/yaml/v3"
)

// setKey replaces the value of key in the mapping n, or appends the key.
func setKey(n *textyaml.Node, key string, v *textyaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = v
			return
		}
	}
	n.Content = append(n.Content, str(key), v)
}

// str is a string scalar, quoted when a YAML 1.1 reader (docker-compose's
// PyYAML) would take it for something else: "no" for false, "1:20" for a
// number.
func str(s string) *textyaml.Node {
	n := &textyaml.Node{Kind: textyaml.ScalarNode, Tag: "!!str", Value: s}
	if yaml11NonString(s) {
		n.Style = textyaml.DoubleQuotedStyle
	}
	return n
}

var base60 = regexp.MustCompile(`^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$`)

func yaml11NonString(s string) bool {
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "":
		return true
	}
	if _, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil {
		return true
	}
	if _, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64); err == nil {
		return true
	}
	return base60.MatchString(s)
}

func seq(items ...*textyaml.Node) *textyaml.Node {
	return &textyaml.Node{Kind: textyaml.SequenceNode, Tag: "!!seq", Content: items}
}

// strSeq is a list of strings, in flow style when it fits on a line.
func strSeq(argv []string) *textyaml.Node {
	n := seq()
	width := 0
	for _, a := range argv {
		n.Content = append(n.Content, str(a))
		width += len(a) + 2
		if strings.ContainsAny(a, "\n") {
			width += 1000
		}
	}
	if width < 72 {
		n.Style = textyaml.FlowStyle
	}
	return n
}

// mapping builds a mapping from key, value pairs.
func mapping(kv ...any) *textyaml.Node {
	n := &textyaml.Node{Kind: textyaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, str(kv[i].(string)), kv[i+1].(*textyaml.Node))
	}
	return n
}

// anyNode encodes a decoded value back into a node.
func anyNode(v any) *textyaml.Node {
	var n textyaml.Node
	if err := n.Encode(v); err != nil {
		return str("")
	}
	return &n
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// shown is a name or image from the file as an error or warning names it:
// as written when it is plain printable text, else Go-quoted, so that a
// line break or control character in it cannot split the message.
func shown(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}

// splitWords splits a command string as Compose does (Python's
// shlex.split): words separated by blanks, single quotes keep everything,
// double quotes keep everything but a backslash before \ " $ `, and a
// backslash outside quotes escapes the next character. No expansion.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case '\'':
			inWord = true
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case '"':
			inWord = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated double quote")
			}
		case '\\':
			inWord = true
			if i+1 >= len(s) {
				return nil, errors.New("backslash at the end")
			}
			i++
			cur.WriteByte(s[i])
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// plainMergeKeys drops the explicit tag the encoder would otherwise write
// before every merge key ("!!merge <<: *x"): "<<" resolves to it anyway.
func plainMergeKeys(n *textyaml.Node) {
	if n == nil {
		return
	}
	if n.Kind == textyaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == textyaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
				k.Tag = ""
			}
		}
	}
	for _, c := range n.Content {
		plainMergeKeys(c)
	}
}
