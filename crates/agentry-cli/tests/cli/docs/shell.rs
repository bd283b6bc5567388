//! The commands of a `sh` block, split into words as a POSIX shell would for
//! what the docs use: quotes, backslashes, `\`-newline continuations, `#`
//! comments, `$(...)` kept as one word, and `;`, `&&`, `||`, `|`, `&` and
//! newlines between commands. No expansion: `$VAR` stays as written.

/// One simple command of a block.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ShellCommand {
    /// 1-based line within the block where the command starts.
    pub(super) line: usize,
    /// Leading `NAME=value` assignments.
    pub(super) env: Vec<(String, String)>,
    /// The program and its arguments.
    pub(super) words: Vec<String>,
    /// The comment at the end of its line, without `#`.
    pub(super) comment: String,
}

impl ShellCommand {
    /// The exit code the docs promise: a comment starting `exit N`, else 0.
    pub(super) fn expected_exit(&self) -> i32 {
        self.comment
            .trim()
            .strip_prefix("exit ")
            .and_then(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .unwrap_or(0)
    }

    /// The command as the docs show it, for messages.
    pub(super) fn shown(&self) -> String {
        let env = self.env.iter().map(|(k, v)| format!("{k}={v} "));
        let shown = env.collect::<String>() + &self.words.join(" ");
        shown.trim_end().to_string()
    }
}

enum Token {
    Word(String, usize),
    Comment(String),
    End,
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
}

/// The commands of a block, or what cannot be read (an unclosed quote).
pub(super) fn commands(script: &str) -> Result<Vec<ShellCommand>, String> {
    let mut lexer = Lexer {
        chars: script.chars().collect(),
        pos: 0,
        line: 1,
    };
    let mut out = Vec::new();
    let mut current = ShellCommand {
        line: 1,
        env: Vec::new(),
        words: Vec::new(),
        comment: String::new(),
    };
    while let Some(token) = lexer.next_token()? {
        match token {
            Token::Comment(text) => current.comment = text,
            Token::Word(word, line) => add_word(&mut current, word, line),
            Token::End => finish(&mut out, &mut current, lexer.line),
        }
    }
    finish(&mut out, &mut current, lexer.line);
    Ok(out)
}

fn add_word(command: &mut ShellCommand, word: String, line: usize) {
    if command.words.is_empty() && command.env.is_empty() {
        command.line = line;
    }
    let assignment = word.split_once('=').filter(|(name, _)| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    match assignment {
        Some((name, value)) if command.words.is_empty() => {
            command.env.push((name.to_string(), value.to_string()));
        }
        _ => command.words.push(word),
    }
}

fn finish(out: &mut Vec<ShellCommand>, current: &mut ShellCommand, line: usize) {
    let next = ShellCommand {
        line,
        env: Vec::new(),
        words: Vec::new(),
        comment: String::new(),
    };
    let done = std::mem::replace(current, next);
    if !done.words.is_empty() || !done.env.is_empty() {
        out.push(done);
    }
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn next_token(&mut self) -> Result<Option<Token>, String> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(' ' | '\t'), _) => {
                    self.bump();
                }
                (Some('\\'), Some('\n')) => {
                    self.bump();
                    self.bump();
                }
                (None, _) => return Ok(None),
                (Some('\n' | ';'), _) => {
                    self.bump();
                    return Ok(Some(Token::End));
                }
                (Some('&' | '|'), next) => {
                    self.bump();
                    if next == Some('&') || next == Some('|') {
                        self.bump();
                    }
                    return Ok(Some(Token::End));
                }
                (Some('#'), _) => return Ok(Some(Token::Comment(self.comment()))),
                (Some(_), _) => {
                    let line = self.line;
                    return self.word().map(|w| Some(Token::Word(w, line)));
                }
            }
        }
    }

    fn comment(&mut self) -> String {
        self.bump();
        let mut text = String::new();
        while let Some(c) = self.peek(0).filter(|&c| c != '\n') {
            text.push(c);
            self.bump();
        }
        text
    }

    fn word(&mut self) -> Result<String, String> {
        let mut word = String::new();
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' => break,
                '\'' => self.single_quoted(&mut word)?,
                '"' => self.double_quoted(&mut word)?,
                '\\' => {
                    self.bump();
                    match self.bump() {
                        Some('\n') | None => {}
                        Some(escaped) => word.push(escaped),
                    }
                }
                '$' if self.peek(1) == Some('(') => self.substitution(&mut word)?,
                _ => {
                    word.push(c);
                    self.bump();
                }
            }
        }
        Ok(word)
    }

    fn single_quoted(&mut self, word: &mut String) -> Result<(), String> {
        let line = self.line;
        self.bump();
        loop {
            match self.bump() {
                Some('\'') => return Ok(()),
                Some(c) => word.push(c),
                None => return Err(format!("line {line}: unclosed '")),
            }
        }
    }

    fn double_quoted(&mut self, word: &mut String) -> Result<(), String> {
        let line = self.line;
        self.bump();
        loop {
            match self.bump() {
                Some('"') => return Ok(()),
                Some('\\') => match self.bump() {
                    Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                    Some('\n') => {}
                    Some(c) => {
                        word.push('\\');
                        word.push(c);
                    }
                    None => return Err(format!("line {line}: unclosed \"")),
                },
                Some(c) => word.push(c),
                None => return Err(format!("line {line}: unclosed \"")),
            }
        }
    }

    /// `$(...)`, kept as written (nothing here runs it).
    fn substitution(&mut self, word: &mut String) -> Result<(), String> {
        let line = self.line;
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        while let Some(c) = self.bump() {
            word.push(c);
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') if depth == 1 => return Ok(()),
                (None, ')') => depth -= 1,
                (None, _) => {}
            }
        }
        Err(format!("line {line}: unclosed $("))
    }
}

#[test]
fn commands_are_split_as_a_shell_splits_them() {
    let script = "# a reason\nA=1 B='x y' agentry run \"a b\" c\\ d   # exit 1: why\n\
                  cargo run -p agentry-cli -- \\\n  runs --all; agentry runs\n\
                  RUN=$(curl -s 'u' | jq -r .id) && agentry resume $RUN\n";
    let commands = commands(script).unwrap();
    let shown: Vec<_> = commands.iter().map(|c| (c.line, c.shown())).collect();
    assert_eq!(
        shown,
        [
            (2, "A=1 B=x y agentry run a b c d".to_string()),
            (3, "cargo run -p agentry-cli -- runs --all".to_string()),
            (4, "agentry runs".to_string()),
            (5, "RUN=$(curl -s 'u' | jq -r .id)".to_string()),
            (5, "agentry resume $RUN".to_string()),
        ]
    );
    assert_eq!(commands[0].words, ["agentry", "run", "a b", "c d"]);
    assert_eq!(commands[0].expected_exit(), 1);
    assert_eq!(commands[1].expected_exit(), 0);
    assert!(super::shell::commands("echo 'open").is_err());
}
