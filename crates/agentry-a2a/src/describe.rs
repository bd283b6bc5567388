//! What the model is told about a remote agent: its tool's description,
//! made from the agent's card.

use crate::card::AgentCard;

/// The longest card description, skill description and example shown to
/// the model (a card may be up to 1 MiB), and the most skills listed.
const MAX_CARD_TEXT: usize = 1000;
const MAX_SKILL_TEXT: usize = 300;
const MAX_EXAMPLE: usize = 100;
const MAX_SKILLS: usize = 20;

/// The description of the tool `<name>.ask` for the agent whose card is
/// `card`: `given` (the task's own words) or a plain lead, the card's
/// description, its skills (name, description, up to two short examples)
/// and how to answer a question.
pub fn card_description(name: &str, given: Option<&str>, card: &AgentCard) -> String {
    let mut text = match given {
        Some(given) => {
            let given = given.trim();
            match given.ends_with(['.', '!', '?']) {
                true => given.to_string(),
                false => format!("{given}."),
            }
        }
        None => format!("Ask the remote A2A agent {name:?}."),
    };
    let said = clip(card.description.trim(), MAX_CARD_TEXT);
    if !said.is_empty() {
        text.push_str(&format!(" Its card: {said}"));
        if !said.ends_with('.') {
            text.push('.');
        }
    }
    let skills: Vec<String> = card
        .skills
        .iter()
        .take(MAX_SKILLS)
        .map(|skill| {
            let named = match skill.name.trim() {
                "" => skill.id.trim(),
                name => name,
            };
            let mut one = named.to_string();
            let what = clip(skill.description.trim(), MAX_SKILL_TEXT);
            let examples: Vec<String> = skill
                .examples
                .iter()
                .map(|e| e.trim())
                .filter(|e| !e.is_empty() && e.chars().count() <= MAX_EXAMPLE)
                .take(2)
                .map(|e| format!("{e:?}"))
                .collect();
            let mut about: Vec<String> = Vec::new();
            if !what.is_empty() {
                about.push(what);
            }
            if !examples.is_empty() {
                about.push(format!("e.g. {}", examples.join(", ")));
            }
            if !about.is_empty() {
                one.push_str(&format!(" ({})", about.join("; ")));
            }
            one
        })
        .collect();
    if !skills.is_empty() {
        text.push_str(&format!(" Skills: {}.", skills.join("; ")));
    }
    text.push_str(" If it asks for input, answer with another call carrying its task_id.");
    text
}

/// `text` cut to at most `max` characters, `…` marking a cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}
