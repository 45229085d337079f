//! nodeadm's `spec.kubelet.maxPodsExpression`: a CEL expression over the instance type's
//! limits that gives max pods (nodeadm `CalcMaxPods`).
//!
//! The variables are `default_enis` (ENIs of the default network card), `ips_per_eni` (IPv4
//! addresses per ENI) and `max_pods` (`default_enis × (ips_per_eni − 1) + 2`). The CEL subset
//! understood: integer literals, the three variables, `true`/`false`, parentheses, unary `-`
//! and `!`, `* / %`, `+ -`, `< <= > >= == !=`, `&&`, `||` and `cond ? a : b`, with CEL's
//! precedence, 64-bit integer arithmetic that fails on overflow and division by zero, and no
//! mixing of integers and booleans. E.g. `max_pods + 2`, `max_pods < 30 ? max_pods : 30`,
//! `((default_enis - 1) * (ips_per_eni - 1)) + 2`.

use std::fmt;

/// A parsed expression, checked for syntax and variable names.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxPodsExpression {
    text: String,
    ast: Expr,
}

/// The variables an expression sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vars {
    pub default_enis: i64,
    pub ips_per_eni: i64,
    pub max_pods: i64,
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Int(i64),
    Bool(bool),
    Var(Var),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    DefaultEnis,
    IpsPerEni,
    MaxPods,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(i64),
    Bool(bool),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl MaxPodsExpression {
    /// Parses `text`. Errors name the position (1-based character) and what was expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        let tokens = lex(text)?;
        let mut p = Parser { tokens, pos: 0 };
        let ast = p.conditional()?;
        if let Some((t, at)) = p.tokens.get(p.pos) {
            return Err(format!("unexpected {t} at character {at}"));
        }
        Ok(MaxPodsExpression {
            text: text.to_string(),
            ast,
        })
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Evaluates to max pods: a whole number from 1 to 2³¹−1. Errors: overflow, division by
    /// zero, a boolean result or operand where a number belongs (and back), a result out of range.
    pub fn eval(&self, vars: Vars) -> Result<u32, String> {
        match eval(&self.ast, vars)? {
            Value::Int(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(n as u32),
            Value::Int(n) => Err(format!("the result {n} is not a positive number of pods")),
            Value::Bool(b) => Err(format!("the result is {b}, not a number")),
        }
    }
}

fn eval(e: &Expr, v: Vars) -> Result<Value, String> {
    let int = |e: &Expr| match eval(e, v)? {
        Value::Int(n) => Ok(n),
        Value::Bool(b) => Err(format!("{b} where a number belongs")),
    };
    let boolean = |e: &Expr| match eval(e, v)? {
        Value::Bool(b) => Ok(b),
        Value::Int(n) => Err(format!("{n} where true or false belongs")),
    };
    let overflow = || "integer overflow".to_string();
    Ok(match e {
        Expr::Int(n) => Value::Int(*n),
        Expr::Bool(b) => Value::Bool(*b),
        Expr::Var(Var::DefaultEnis) => Value::Int(v.default_enis),
        Expr::Var(Var::IpsPerEni) => Value::Int(v.ips_per_eni),
        Expr::Var(Var::MaxPods) => Value::Int(v.max_pods),
        Expr::Neg(a) => Value::Int(int(a)?.checked_neg().ok_or_else(overflow)?),
        Expr::Not(a) => Value::Bool(!boolean(a)?),
        Expr::Cond(c, a, b) => {
            if boolean(c)? {
                eval(a, v)?
            } else {
                eval(b, v)?
            }
        }
        Expr::Bin(Op::And, a, b) => Value::Bool(boolean(a)? && boolean(b)?),
        Expr::Bin(Op::Or, a, b) => Value::Bool(boolean(a)? || boolean(b)?),
        Expr::Bin(op @ (Op::Eq | Op::Ne), a, b) => {
            let same = match (eval(a, v)?, eval(b, v)?) {
                (Value::Int(x), Value::Int(y)) => x == y,
                (Value::Bool(x), Value::Bool(y)) => x == y,
                (x, y) => return Err(format!("cannot compare {x} with {y}")),
            };
            Value::Bool(same == (*op == Op::Eq))
        }
        Expr::Bin(op, a, b) => {
            let (x, y) = (int(a)?, int(b)?);
            match op {
                Op::Mul => Value::Int(x.checked_mul(y).ok_or_else(overflow)?),
                Op::Div | Op::Rem if y == 0 => return Err("division by zero".into()),
                Op::Div => Value::Int(x.checked_div(y).ok_or_else(overflow)?),
                Op::Rem => Value::Int(x.checked_rem(y).ok_or_else(overflow)?),
                Op::Add => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
                Op::Sub => Value::Int(x.checked_sub(y).ok_or_else(overflow)?),
                Op::Lt => Value::Bool(x < y),
                Op::Le => Value::Bool(x <= y),
                Op::Gt => Value::Bool(x > y),
                Op::Ge => Value::Bool(x >= y),
                Op::Eq | Op::Ne | Op::And | Op::Or => unreachable!("handled above"),
            }
        }
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Ident(String),
    Sym(&'static str),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Int(n) => write!(f, "number {n}"),
            Tok::Ident(s) => write!(f, "name {s:?}"),
            Tok::Sym(s) => write!(f, "{s:?}"),
        }
    }
}

const SYMBOLS: [&str; 18] = [
    "<=", ">=", "==", "!=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", "(", ")",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let s: String = chars[start..i].iter().collect();
            let n = s
                .parse::<i64>()
                .map_err(|_| format!("number {s} at character {at} is too large"))?;
            out.push((Tok::Int(n), at));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(chars[start..i].iter().collect()), at));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let sym = SYMBOLS
                .iter()
                .find(|s| rest.starts_with(**s))
                .ok_or_else(|| format!("unexpected character {c:?} at character {at}"))?;
            out.push((Tok::Sym(sym), at));
            i += sym.chars().count();
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<(Tok, usize)>,
    pos: usize,
}

impl Parser {
    fn peek_sym(&self) -> Option<&'static str> {
        match self.tokens.get(self.pos) {
            Some((Tok::Sym(s), _)) => Some(s),
            _ => None,
        }
    }

    fn eat(&mut self, sym: &str) -> bool {
        if self.peek_sym() == Some(sym) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, sym: &str) -> Result<(), String> {
        if self.eat(sym) {
            return Ok(());
        }
        Err(match self.tokens.get(self.pos) {
            Some((t, at)) => format!("expected {sym:?} at character {at}, found {t}"),
            None => format!("expected {sym:?} at the end"),
        })
    }

    fn conditional(&mut self) -> Result<Expr, String> {
        let c = self.binary(0)?;
        if self.eat("?") {
            let a = self.conditional()?;
            self.expect(":")?;
            let b = self.conditional()?;
            return Ok(Expr::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    /// Binary operators by CEL precedence level, lowest first; all left-associative.
    fn binary(&mut self, level: usize) -> Result<Expr, String> {
        const LEVELS: [&[(&str, Op)]; 5] = [
            &[("||", Op::Or)],
            &[("&&", Op::And)],
            &[
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("<", Op::Lt),
                (">", Op::Gt),
                ("==", Op::Eq),
                ("!=", Op::Ne),
            ],
            &[("+", Op::Add), ("-", Op::Sub)],
            &[("*", Op::Mul), ("/", Op::Div), ("%", Op::Rem)],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.unary();
        };
        let mut left = self.binary(level + 1)?;
        while let Some(&(_, op)) = self
            .peek_sym()
            .and_then(|s| ops.iter().find(|(t, _)| *t == s))
        {
            self.pos += 1;
            let right = self.binary(level + 1)?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let Some((tok, at)) = self.tokens.get(self.pos).cloned() else {
            return Err("the expression ends where a value belongs".into());
        };
        self.pos += 1;
        match tok {
            Tok::Int(n) => Ok(Expr::Int(n)),
            Tok::Ident(name) => match name.as_str() {
                "default_enis" => Ok(Expr::Var(Var::DefaultEnis)),
                "ips_per_eni" => Ok(Expr::Var(Var::IpsPerEni)),
                "max_pods" => Ok(Expr::Var(Var::MaxPods)),
                "true" => Ok(Expr::Bool(true)),
                "false" => Ok(Expr::Bool(false)),
                other => Err(format!(
                    "unknown name {other:?} at character {at}; the variables are default_enis, ips_per_eni and max_pods"
                )),
            },
            Tok::Sym("(") => {
                let e = self.conditional()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Sym(s) => Err(format!("unexpected {s:?} at character {at}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const M5_LARGE: Vars = Vars {
        default_enis: 3,
        ips_per_eni: 10,
        max_pods: 29,
    };

    fn eval_str(s: &str) -> Result<u32, String> {
        MaxPodsExpression::parse(s)?.eval(M5_LARGE)
    }

    #[test]
    fn nodeadm_examples() {
        assert_eq!(eval_str("max_pods + 2"), Ok(31));
        assert_eq!(eval_str("max_pods < 30 ? max_pods : 30"), Ok(29));
        assert_eq!(eval_str("max_pods > 20 ? 20 : max_pods"), Ok(20));
        assert_eq!(
            eval_str("((default_enis -1) * (ips_per_eni - 1)) + 2"),
            Ok(20)
        );
        assert_eq!(
            eval_str("((default_enis - 3) * (ips_per_eni - 1)) + 2"),
            Ok(2)
        );
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval_str("2 + 3 * 4"), Ok(14));
        assert_eq!(eval_str("20 - 5 - 3"), Ok(12));
        assert_eq!(eval_str("17 % 5 * 2"), Ok(4));
        assert_eq!(eval_str("-(-7)"), Ok(7));
        assert_eq!(eval_str("1 < 2 && !(3 == 4) || false ? 8 : 9"), Ok(8));
        assert_eq!(eval_str("true ? false ? 1 : 2 : 3"), Ok(2));
    }

    #[test]
    fn errors_name_the_problem() {
        let parse = |s: &str| MaxPodsExpression::parse(s).unwrap_err();
        assert!(parse("max_pod + 1").contains("unknown name \"max_pod\" at character 1"));
        assert!(parse("(max_pods").contains("expected \")\""));
        assert!(parse("max_pods +").contains("ends where a value belongs"));
        assert!(parse("max_pods $ 2").contains("'$'"));
        assert!(parse("1 2").contains("unexpected number 2 at character 3"));
        assert!(eval_str("max_pods / (default_enis - 3)")
            .unwrap_err()
            .contains("division by zero"));
        assert!(eval_str("max_pods - 100")
            .unwrap_err()
            .contains("not a positive"));
        assert!(eval_str("max_pods > 2")
            .unwrap_err()
            .contains("not a number"));
        assert!(eval_str("max_pods && true")
            .unwrap_err()
            .contains("29 where true or false"));
        assert!(eval_str("9223372036854775807 + 1")
            .unwrap_err()
            .contains("overflow"));
    }

    proptest! {
        /// Sums, differences and products of the variables evaluate as in Rust.
        #[test]
        fn arithmetic_matches(a in 0i64..1000, b in 0i64..1000, k in 1i64..50) {
            let v = Vars { default_enis: a, ips_per_eni: b, max_pods: k };
            let e = MaxPodsExpression::parse("default_enis * ips_per_eni + max_pods - default_enis").unwrap();
            let want = a * b + k - a;
            prop_assert_eq!(e.eval(v).ok(), (want >= 1).then_some(want as u32));
            let c = MaxPodsExpression::parse("max_pods < default_enis ? max_pods : default_enis").unwrap();
            let want = k.min(a);
            prop_assert_eq!(c.eval(v).ok(), if want > 0 { Some(want as u32) } else { None });
        }
    }
}
