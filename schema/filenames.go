package schema

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// nameProblem says what is wrong with the path of a manifest file, or ""
// when nothing is: a path must be valid UTF-8 without control characters,
// so that every problem can name its file plainly.
func nameProblem(name string) string {
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("the file name is not valid UTF-8 (byte %#x at offset %d); rename the file or its directory", name[i], i)
		case unicode.IsControl(r):
			return fmt.Sprintf("the file name has the control character %U at offset %d; rename the file or its directory to printable characters", r, i)
		}
		i += size
	}
	return ""
}

// displayPath is name as problems show it: unchanged when it is printable,
// else with Go escapes, such as bad\x01.yaml.
func displayPath(name string) string {
	if nameProblem(name) == "" {
		return name
	}
	q := strconv.Quote(name)
	return q[1 : len(q)-1]
}
