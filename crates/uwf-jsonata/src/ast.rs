//! The abstract syntax tree of a parsed JSONata expression.
//!
//! The tree is the *processed* form: path expressions are flattened into
//! [`Kind::Path`] steps, predicates inside paths are [`Stage`]s of their
//! step, group-by, focus (`@`) and index (`#`) bindings are annotations on
//! the node they apply to. Every node carries a byte [`Span`] into the
//! source so that static checks can point at the offending text.

use std::sync::Arc;

use crate::signature::Signature;

/// A byte range in the expression source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset one past the last byte.
    pub end: usize,
}

/// One node of the processed syntax tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// What the node is.
    pub kind: Kind,
    /// Where the node's token is in the source.
    pub span: Span,
    /// Filters and index bindings applied to this node as a path step.
    pub stages: Vec<Stage>,
    /// Filters applied to this node when it is not a path step.
    pub predicates: Vec<Node>,
    /// Group-by object (`expr{k: v}`) applied to the node's result.
    pub group: Option<Box<GroupBy>>,
    /// Focus variable bound by `@$v` on this step.
    pub focus: Option<String>,
    /// Index variable bound by `#$i` on this step.
    pub index: Option<String>,
    /// Whether this step produces a tuple stream (focus or index binding).
    pub tuple: bool,
    /// `[]` was applied: keep singleton arrays.
    pub keep_array: bool,
    /// An array constructor at the start or end of a path (not flattened).
    pub cons_array: bool,
    /// Label of the parent slot (`%`) this step binds for later steps, if any.
    pub ancestor: Option<String>,
    /// Parse-time bookkeeping: parent slots still looking for their step.
    #[doc(hidden)]
    pub seeking: Vec<usize>,
    #[doc(hidden)]
    pub ancestor_slot: Option<usize>,
}

impl Node {
    /// A node with no annotations.
    pub fn new(kind: Kind, span: Span) -> Node {
        Node {
            kind,
            span,
            stages: Vec::new(),
            predicates: Vec::new(),
            group: None,
            focus: None,
            index: None,
            tuple: false,
            keep_array: false,
            cons_array: false,
            ancestor: None,
            seeking: Vec::new(),
            ancestor_slot: None,
        }
    }

    /// Whether nothing is applied to the node as a path step or a value:
    /// no stage, predicate, group, focus or index binding, `[]`, array
    /// constructor or ancestor label.
    pub fn is_bare(&self) -> bool {
        self.stages.is_empty()
            && self.predicates.is_empty()
            && self.group.is_none()
            && self.focus.is_none()
            && self.index.is_none()
            && !self.tuple
            && !self.keep_array
            && !self.cons_array
            && self.ancestor.is_none()
    }

    /// Visits every node mutably (used to finish parsing).
    pub(crate) fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Node)) {
        f(self);
        for s in &mut self.stages {
            if let Stage::Filter(n) = s {
                n.walk_mut(f);
            }
        }
        for p in &mut self.predicates {
            p.walk_mut(f);
        }
        if let Some(g) = &mut self.group {
            for (k, v) in &mut g.pairs {
                k.walk_mut(f);
                v.walk_mut(f);
            }
        }
        match &mut self.kind {
            Kind::Path { steps, .. } => steps.iter_mut().for_each(|n| n.walk_mut(f)),
            Kind::Binary { lhs, rhs, .. } | Kind::Apply { lhs, rhs } => {
                lhs.walk_mut(f);
                rhs.walk_mut(f);
            }
            Kind::Negate(e) => e.walk_mut(f),
            Kind::Array(items) | Kind::Block(items) => items.iter_mut().for_each(|n| n.walk_mut(f)),
            Kind::Object(pairs) => pairs.iter_mut().for_each(|(k, v)| {
                k.walk_mut(f);
                v.walk_mut(f);
            }),
            Kind::Condition {
                condition,
                then,
                otherwise,
            } => {
                condition.walk_mut(f);
                then.walk_mut(f);
                if let Some(o) = otherwise {
                    o.walk_mut(f);
                }
            }
            Kind::Bind { value, .. } => value.walk_mut(f),
            Kind::Call {
                procedure, args, ..
            } => {
                procedure.walk_mut(f);
                args.iter_mut().for_each(|n| n.walk_mut(f));
            }
            Kind::Lambda(l) => {
                if let Some(l) = Arc::get_mut(l) {
                    l.body.walk_mut(f);
                }
            }
            Kind::Transform(t) => {
                if let Some(t) = Arc::get_mut(t) {
                    t.pattern.walk_mut(f);
                    t.update.walk_mut(f);
                    if let Some(d) = &mut t.delete {
                        d.walk_mut(f);
                    }
                }
            }
            Kind::Sort(terms) => terms.iter_mut().for_each(|t| t.expr.walk_mut(f)),
            _ => {}
        }
    }

    /// Visits this node and every node below it (depth first, parents before children).
    pub fn walk(&self, f: &mut dyn FnMut(&Node)) {
        f(self);
        for s in &self.stages {
            if let Stage::Filter(n) = s {
                n.walk(f);
            }
        }
        for p in &self.predicates {
            p.walk(f);
        }
        if let Some(g) = &self.group {
            for (k, v) in &g.pairs {
                k.walk(f);
                v.walk(f);
            }
        }
        match &self.kind {
            Kind::Path { steps, .. } => steps.iter().for_each(|n| n.walk(f)),
            Kind::Binary { lhs, rhs, .. } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            Kind::Negate(e) => e.walk(f),
            Kind::Array(items) | Kind::Block(items) => items.iter().for_each(|n| n.walk(f)),
            Kind::Object(pairs) => pairs.iter().for_each(|(k, v)| {
                k.walk(f);
                v.walk(f);
            }),
            Kind::Condition {
                condition,
                then,
                otherwise,
            } => {
                condition.walk(f);
                then.walk(f);
                if let Some(o) = otherwise {
                    o.walk(f);
                }
            }
            Kind::Bind { value, .. } => value.walk(f),
            Kind::Apply { lhs, rhs } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            Kind::Call {
                procedure, args, ..
            } => {
                procedure.walk(f);
                args.iter().for_each(|n| n.walk(f));
            }
            Kind::Lambda(l) => l.body.walk(f),
            Kind::Transform(t) => {
                t.pattern.walk(f);
                t.update.walk(f);
                if let Some(d) = &t.delete {
                    d.walk(f);
                }
            }
            Kind::Sort(terms) => terms.iter().for_each(|t| t.expr.walk(f)),
            _ => {}
        }
    }
}

/// A stage of a path step: a filter predicate or an index (`#$i`) binding.
#[derive(Debug, Clone)]
pub enum Stage {
    /// `step[expr]`.
    Filter(Box<Node>),
    /// `step#$name` after a predicate.
    Index(String),
}

/// A group-by object constructor applied to an expression.
#[derive(Debug, Clone)]
pub struct GroupBy {
    /// Key/value expression pairs.
    pub pairs: Vec<(Node, Node)>,
    /// Where the `{` is.
    pub span: Span,
}

/// One `^(...)` sort term.
#[derive(Debug, Clone)]
pub struct SortTerm {
    /// Sort descending (`>`).
    pub descending: bool,
    /// The sort key expression.
    pub expr: Node,
}

/// A lambda definition `function($a, $b)<sig>{ body }`.
#[derive(Debug)]
pub struct LambdaDef {
    /// Parameter names without `$`.
    pub params: Vec<String>,
    /// Optional signature.
    pub signature: Option<Signature>,
    /// The body.
    pub body: Node,
}

/// A transform `| pattern | update, delete |`.
#[derive(Debug)]
pub struct TransformDef {
    /// Selects the objects to change.
    pub pattern: Node,
    /// Object merged into each selected object.
    pub update: Node,
    /// Field name(s) removed from each selected object.
    pub delete: Option<Node>,
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`
    Concat,
    /// `and`
    And,
    /// `or`
    Or,
    /// `in`
    In,
    /// `..` (inside array constructors)
    Range,
    /// `?:`
    Elvis,
    /// `??`
    Coalesce,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Eq => "=",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Concat => "&",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::In => "in",
            BinOp::Range => "..",
            BinOp::Elvis => "?:",
            BinOp::Coalesce => "??",
        }
    }
}

/// The node kinds.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A location path `a.b[0].c`.
    Path {
        /// The steps, evaluated left to right.
        steps: Vec<Node>,
        /// Some step used `[]`: keep singleton arrays in the result.
        keep_singleton: bool,
    },
    /// A field name.
    Name(String),
    /// `$name` (`$` alone is the empty name, `$$` is `"$"`).
    Variable(String),
    /// A string literal.
    String(String),
    /// A number literal.
    Number(f64),
    /// `true` / `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// A regex literal.
    Regex {
        /// The pattern text between the slashes.
        pattern: String,
        /// The flags after the closing slash.
        flags: String,
    },
    /// `*`
    Wildcard,
    /// `**`
    Descendant,
    /// `%`, resolved to the label of the ancestor step that binds it.
    Parent {
        /// Parse-time slot number.
        slot: usize,
        /// The variable label the ancestor step binds.
        label: String,
    },
    /// A binary operator.
    Binary {
        /// The operator.
        op: BinOp,
        /// Left operand.
        lhs: Box<Node>,
        /// Right operand.
        rhs: Box<Node>,
    },
    /// Unary minus.
    Negate(Box<Node>),
    /// Array constructor `[a, b]`.
    Array(Vec<Node>),
    /// Object constructor `{k: v}` (not applied to an expression).
    Object(Vec<(Node, Node)>),
    /// Block `(a; b)`.
    Block(Vec<Node>),
    /// `c ? a : b`.
    Condition {
        /// The condition.
        condition: Box<Node>,
        /// Value when true.
        then: Box<Node>,
        /// Value when false (undefined when absent).
        otherwise: Option<Box<Node>>,
    },
    /// `$name := value`.
    Bind {
        /// Variable name without `$`.
        name: String,
        /// Bound value.
        value: Box<Node>,
    },
    /// `lhs ~> rhs`.
    Apply {
        /// The value.
        lhs: Box<Node>,
        /// The function.
        rhs: Box<Node>,
    },
    /// Function call `f(args)`, partial application if some argument is `?`.
    Call {
        /// The called expression.
        procedure: Box<Node>,
        /// The arguments.
        args: Vec<Node>,
        /// Some argument is a `?` placeholder.
        partial: bool,
        /// In tail position of a lambda body (evaluated as a trampoline).
        tail: bool,
    },
    /// `?` argument placeholder.
    Placeholder,
    /// Lambda definition.
    Lambda(Arc<LambdaDef>),
    /// Transform.
    Transform(Arc<TransformDef>),
    /// Order-by step `^(...)`.
    Sort(Vec<SortTerm>),
}
