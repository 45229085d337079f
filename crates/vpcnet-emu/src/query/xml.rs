//! A small XML writer for EC2 Query responses: escaped text, and characters XML 1.0 cannot
//! carry replaced by U+FFFD, so every answer is well-formed whatever the input held.

use std::fmt::Display;

/// EC2's XML namespace for API version 2016-11-15.
pub const EC2_XMLNS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

#[derive(Debug, Default)]
pub struct Xml {
    buf: String,
}

fn push_escaped(buf: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => buf.push_str("&amp;"),
            '<' => buf.push_str("&lt;"),
            '>' => buf.push_str("&gt;"),
            '"' => buf.push_str("&quot;"),
            '\'' => buf.push_str("&apos;"),
            '\t' | '\n' | '\r' => buf.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => buf.push('\u{FFFD}'),
            c => buf.push(c),
        }
    }
}

impl Xml {
    /// Start a response document with root `<{root} xmlns="...">` in EC2's namespace.
    pub fn response(root: &str) -> Self {
        Self::response_in(root, EC2_XMLNS)
    }

    /// Start a response document with root `<{root} xmlns="{xmlns}">` (another service's
    /// namespace, e.g. ELBv2's).
    pub fn response_in(root: &str, xmlns: &str) -> Self {
        let mut x = Xml {
            buf: String::with_capacity(1024),
        };
        x.buf
            .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<");
        x.buf.push_str(root);
        x.buf.push_str(" xmlns=\"");
        x.buf.push_str(xmlns);
        x.buf.push_str("\">");
        x
    }

    /// A bare document (for the error envelope, which has no namespace).
    pub fn bare(root: &str) -> Self {
        let mut x = Xml { buf: String::new() };
        x.buf
            .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        x.open(root);
        x
    }

    pub fn open(&mut self, tag: &str) -> &mut Self {
        self.buf.push('<');
        self.buf.push_str(tag);
        self.buf.push('>');
        self
    }

    pub fn close(&mut self, tag: &str) -> &mut Self {
        self.buf.push_str("</");
        self.buf.push_str(tag);
        self.buf.push('>');
        self
    }

    /// `<tag>escaped value</tag>`
    pub fn leaf(&mut self, tag: &str, value: impl Display) -> &mut Self {
        self.open(tag);
        push_escaped(&mut self.buf, &value.to_string());
        self.close(tag)
    }

    /// Escaped text inside the element open now (e.g. an `<item>` of a list of strings).
    pub fn text(&mut self, value: impl Display) -> &mut Self {
        push_escaped(&mut self.buf, &value.to_string());
        self
    }

    /// `<tag>` with `<item>` children written by `f`, then `</tag>`.
    pub fn set<T>(
        &mut self,
        tag: &str,
        items: impl IntoIterator<Item = T>,
        mut f: impl FnMut(&mut Xml, T),
    ) -> &mut Self {
        self.open(tag);
        for it in items {
            self.open("item");
            f(self, it);
            self.close("item");
        }
        self.close(tag)
    }

    /// Close the root and return the document.
    pub fn finish(mut self, root: &str) -> String {
        self.close(root);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_sanitizes() {
        let mut x = Xml::response("R");
        x.leaf("a", "<&>\"'\u{1}ok");
        let s = x.finish("R");
        assert!(
            s.ends_with("<a>&lt;&amp;&gt;&quot;&apos;\u{FFFD}ok</a></R>"),
            "{s}"
        );
    }
}
