// Package docs checks that README.md and docs/*.md stay true: the shell
// blocks marked runnable run, every make target, repository path, link and
// manager flag they name exists, and the YAML examples decode into kao's
// types. The rules are in docs/development.md, "Documentation".
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Page is one Markdown file of the documentation.
type Page struct {
	// Rel is the path from the repository root, e.g. "docs/members.md".
	Rel string
	// Lines are the file's lines.
	Lines []string
	// Blocks are its fenced code blocks.
	Blocks []Block
	// Prose are the lines outside code blocks, with their line numbers.
	Prose []Line
	// Paragraphs are the prose lines joined into paragraphs (a code span or
	// a link may wrap onto the next line); a heading or a table row is a
	// paragraph of its own. N is the paragraph's first line.
	Paragraphs []Line
}

// Line is one line of prose.
type Line struct {
	N    int
	Text string
}

// Block is a fenced code block.
type Block struct {
	// Line is the 1-based line of the opening fence.
	Line int
	// Lang is the first word of the info string ("sh", "yaml", ...).
	Lang string
	// Runnable is set by the info string "sh runnable".
	Runnable bool
	// Body is the block's content, its indentation removed.
	Body string
}

// RunnableMarker is the word after the language that marks a block to run.
const RunnableMarker = "runnable"

var fenceRE = regexp.MustCompile("^( *)(```+|~~~+)\\s*(.*)$")

// Parse splits a Markdown file into code blocks and prose.
func Parse(rel, text string) Page {
	p := Page{Rel: rel, Lines: strings.Split(strings.TrimSuffix(text, "\n"), "\n")}
	for i := 0; i < len(p.Lines); i++ {
		m := fenceRE.FindStringSubmatch(p.Lines[i])
		if m == nil {
			p.Prose = append(p.Prose, Line{N: i + 1, Text: p.Lines[i]})
			continue
		}
		indent, fence, info := len(m[1]), m[2], strings.Fields(m[3])
		b := Block{Line: i + 1}
		if len(info) > 0 {
			b.Lang = info[0]
			b.Runnable = slices.Contains(info[1:], RunnableMarker)
		}
		var body []string
		for i++; i < len(p.Lines); i++ {
			l := p.Lines[i]
			if strings.HasPrefix(strings.TrimLeft(l, " "), fence) && strings.TrimSpace(strings.Trim(strings.TrimSpace(l), fence[:1])) == "" {
				break
			}
			trimmed := l
			for j := 0; j < indent && strings.HasPrefix(trimmed, " "); j++ {
				trimmed = trimmed[1:]
			}
			body = append(body, trimmed)
		}
		b.Body = strings.Join(body, "\n") + "\n"
		p.Blocks = append(p.Blocks, b)
	}
	p.Paragraphs = paragraphs(p.Prose)
	return p
}

// paragraphs joins consecutive prose lines, breaking at blank lines,
// headings, table rows and code blocks.
func paragraphs(prose []Line) []Line {
	var out []Line
	var cur *Line
	prev := 0
	for _, l := range prose {
		t := strings.TrimSpace(l.Text)
		single := strings.HasPrefix(t, "#") || strings.HasPrefix(t, "|")
		if t == "" || single || l.N != prev+1 {
			cur = nil
		}
		prev = l.N
		switch {
		case t == "":
		case single:
			out = append(out, Line{N: l.N, Text: t})
		case cur == nil:
			out = append(out, Line{N: l.N, Text: t})
			cur = &out[len(out)-1]
		default:
			cur.Text += " " + t
		}
	}
	return out
}

// LoadPages reads README.md and docs/*.md under root.
func LoadPages(root string) ([]Page, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var pages []Page
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		pages = append(pages, Parse(filepath.ToSlash(rel), string(data)))
	}
	return pages, nil
}

var (
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// CodeSpans returns the inline code spans of a prose line.
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpanRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Links returns the targets of the inline links of a prose line.
func Links(s string) []string {
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Anchors returns the anchors GitHub gives the headings of a Markdown file.
func Anchors(p Page) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range p.Prose {
		t := strings.TrimLeft(l.Text, "#")
		if len(t) == len(l.Text) || !strings.HasPrefix(t, " ") {
			continue
		}
		slug := Slug(strings.TrimSpace(t))
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// Slug is GitHub's heading anchor: lower case, punctuation dropped, spaces
// turned into hyphens.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool {
	return strings.ToUpper(string(r)) != strings.ToLower(string(r))
}

// Words splits a shell line into words the way sh would for plain commands:
// quotes group, a backslash escapes, and a # starting a word ends the line.
func Words(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for i := 0; i < len(line); i++ {
		c := rune(line[i])
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// shellOps end one command and start another.
var shellOps = map[string]bool{"|": true, "||": true, "&&": true, ";": true, "&": true, "(": true, ")": true}

// Commands splits a shell block into commands, each a list of words; lines
// ending with a backslash continue.
func Commands(body string) [][]string {
	var cmds [][]string
	joined := strings.ReplaceAll(body, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		var cur []string
		for _, w := range Words(line) {
			if shellOps[w] {
				if len(cur) > 0 {
					cmds = append(cmds, cur)
				}
				cur = nil
				continue
			}
			cur = append(cur, strings.TrimSuffix(w, ";"))
		}
		if len(cur) > 0 {
			cmds = append(cmds, cur)
		}
	}
	return cmds
}

// MakeTargets returns the targets of a make command, or nil when cmd does not
// run make. sudo and variable assignments before make are skipped, and so are
// options and assignments after it.
func MakeTargets(cmd []string) []string {
	i := 0
	for i < len(cmd) && (cmd[i] == "sudo" || cmd[i] == "env" || strings.Contains(cmd[i], "=")) {
		i++
	}
	if i >= len(cmd) || cmd[i] != "make" {
		return nil
	}
	var targets []string
	for _, w := range cmd[i+1:] {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		targets = append(targets, w)
	}
	return targets
}

var pathRE = regexp.MustCompile(`^(\./)?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?(\.\.\.)?$`)

// RepoPath returns the repository path a word names, and whether it names
// one: a relative path with a slash whose first element is one of the
// repository's top-level entries (topLevel). Patterns such as ./... lose
// their dots.
func RepoPath(word string, topLevel map[string]bool) (string, bool) {
	if !pathRE.MatchString(word) || !strings.Contains(strings.TrimPrefix(word, "./"), "/") {
		return "", false
	}
	p := strings.TrimSuffix(strings.TrimPrefix(word, "./"), "...")
	first := strings.SplitN(p, "/", 2)[0]
	if !topLevel[first] {
		return "", false
	}
	return strings.TrimSuffix(p, "/"), true
}
