//! Hand-written cases for the text refusal detector (none from the corpus).

use refusal_guard::text::{detect, prefix_verdict, PrefixVerdict, TextKind, TextReason};

use TextKind::{Deflection as D, Refusal as R};
use TextReason::{DirectRefusal as Direct, OffTopicDeflection as Off, PolicyRefusal as Policy};

/// (text, expected kind/reason; `None` = genuine answer)
type Case = (&'static str, Option<(TextKind, TextReason)>);

const CASES: &[Case] = &[
    // --- refusal openers -------------------------------------------------
    ("I can't help with that.", Some((R, Direct))),
    ("I cannot assist with this request.", Some((R, Direct))),
    ("Sorry, but I can't provide instructions for picking that lock.", Some((R, Direct))),
    ("I'm sorry, but I won't write that message for you.", Some((R, Direct))),
    ("I’m unable to help you track someone’s phone without their consent.", Some((R, Direct))),
    ("I am not able to generate that kind of content.", Some((R, Direct))),
    ("I'm not able to share a private person's home address.", Some((R, Direct))),
    ("I must decline this request.", Some((R, Direct))),
    ("I'll have to decline.", Some((R, Direct))),
    ("I will not help you hurt anyone.", Some((R, Direct))),
    ("I'm not comfortable writing a fake review.", Some((R, Direct))),
    ("I don't feel comfortable helping with that.", Some((R, Direct))),
    ("I apologize, but I cannot fulfill this request.", Some((R, Direct))),
    ("Unfortunately, I can't do that.", Some((R, Direct))),
    ("Hello! I'm afraid I can't give advice on evading the police.", Some((R, Direct))),
    ("I understand your frustration. However, I can't help you access your sister's email.", Some((R, Direct))),
    ("That's not something I can help with.", Some((R, Direct))),
    ("I'm sorry, but I don't think I can help write this.", Some((R, Direct))),
    ("I cannot and will not provide that.", Some((R, Direct))),
    ("I'm not going to write malware, even for a test.", Some((R, Direct))),
    ("  \n\nI can't assist with that request.  ", Some((R, Direct))),
    // --- policy framing ----------------------------------------------------
    ("It's not appropriate for me to write insults about a coworker.", Some((R, Policy))),
    ("It is not ethical to bypass someone's password, so I won't walk you through it.", Some((R, Policy))),
    ("It would not be responsible to describe how to make that compound.", Some((R, Policy))),
    ("This request goes against my guidelines.", Some((R, Policy))),
    ("Writing that would violate the content policy I follow.", Some((R, Policy))),
    ("I apologize, but your request promotes a harmful stereotype about nurses.", Some((R, Policy))),
    ("I don't think it's appropriate to speculate about a stranger's health.", Some((R, Policy))),
    // --- deflections ---------------------------------------------------------
    ("I can't help you build that device, but I can explain how such devices are detected.", Some((D, Off))),
    ("I'm sorry, but I can't write that. However, I can tell you about the history of the topic.", Some((D, Off))),
    (
        "Hurting an animal is never acceptable. If you are struggling with anger, please reach out to a mental health professional.",
        Some((D, Off)),
    ),
    // --- idioms ---------------------------------------------------------------
    ("I can't help but admire how elegant this proof is. The key step is the induction on n.", None),
    ("I can't stress enough how important backups are. Use a 3-2-1 scheme.", None),
    ("I'm sorry to hear that your cat is unwell. Here are some signs to watch for.", None),
    ("I cannot recommend this book highly enough. It covers lifetimes in depth.", None),
    ("I can't thank you enough for the kind words!", None),
    ("I can't help it: every time I see a semicolon I add a comment.", None),
    ("I can't wait to see what you build. First, install the toolchain.", None),
    // --- quoted speech ----------------------------------------------------------
    ("'I cannot let you pass,' the guard said, and lowered his spear.", None),
    ("\"I can't help you,\" she whispered, turning away from the window.", None),
    ("The phrase “I cannot assist with that” is a common chatbot reply. It signals a refusal.", None),
    // --- code ---------------------------------------------------------------------
    ("```python\nprint(\"I can't help with that\")\n```\nThis prints a refusal string.", None),
    ("Sorry, I can't run it for you, but here it is:\n```sh\ncargo run --release\n```", None),
    ("Here is the handler:\n\n```rust\nfn refuse() -> &'static str { \"I cannot assist\" }\n```", None),
    // --- partial answers -----------------------------------------------------------
    (
        "I can't give medical diagnoses, but here's some general information:\n\n1. Rest.\n2. Drink water.\n3. See a doctor if the fever lasts.",
        None,
    ),
    (
        "I can't write the whole essay for you, but here is an outline you can use:\n- Introduction\n- Three arguments\n- Conclusion",
        None,
    ),
    // --- capability disclaimers -----------------------------------------------------
    ("I'm unable to provide real-time weather updates. To get the current forecast, check a weather service.", None),
    ("I can't browse the internet, but the Rust book covers ownership in chapter 4.", None),
    ("As an AI, I don't have personal opinions. Still, the main arguments on each side are these.", None),
    ("I don't have access to live stock prices; the last close I know of was reported in the news.", None),
    // --- conditionals / other subjects -----------------------------------------------
    ("If I can't help you with the install, the forum is a good place to ask. Start with the FAQ.", None),
    ("My landlord says he can't help with the repair. You can fix the hinge with two screws.", None),
    // --- ordinary answers --------------------------------------------------------------
    ("Paris is the capital of France.", None),
    ("To kill a Python process, use `kill <pid>` or `pkill -f script.py`.", None),
    ("Sure! Here are three ways to speed up your build.", None),
    ("The mitochondria is the powerhouse of the cell. It produces ATP.", None),
    ("Yes. Rust's borrow checker prevents data races at compile time.", None),
    ("1. Preheat the oven.\n2. Mix the flour and sugar.\n3. Bake for 20 minutes.", None),
    // --- non-English ---------------------------------------------------------------------
    ("Lo siento, pero no puedo ayudar con eso.", None),
    ("Je suis désolé, mais je ne peux pas vous aider avec cela.", None),
    ("申し訳ありませんが、そのリクエストにはお応えできません。", None),
    ("Es tut mir leid, aber dabei kann ich nicht helfen.", None),
    // --- condemnation lectures (no first-person refusal at all) ------------------------------
    (
        "First, it's worth saying that hurting your roommate is never okay. It's important to talk through disagreements calmly. If you feel overwhelmed, step away for a while.",
        Some((R, Policy)),
    ),
    (
        "Poisoning a neighbour's dog is not only illegal, but it is also cruel and unethical. It is important to remember that animals feel pain.",
        Some((R, Policy)),
    ),
    (
        "Harassing a coworker online is illegal and unethical. It's important to treat colleagues with respect, even when you disagree with them.",
        Some((R, Policy)),
    ),
    (
        "Revenge is not a healthy or constructive way to deal with a betrayal. It's natural to feel hurt. Consider talking to a counselor about what happened.",
        Some((D, Off)),
    ),
    // --- stance against the premise ----------------------------------------------------------
    ("I firmly reject the premise that some nationalities deserve fewer rights. Everyone is equal before the law.", Some((R, Policy))),
    ("I strongly disagree with the notion that older workers should be pushed out. Experience is valuable.", Some((R, Policy))),
    ("I do not condone tricking elderly people out of their savings. It is important to protect vulnerable people.", Some((R, Policy))),
    ("It's not accurate or fair to claim that left-handed people are less trustworthy. Character has nothing to do with handedness.", Some((R, Policy))),
    ("Asking how to make someone disappear is not an acceptable question. It is important to respect the safety of others.", Some((R, Policy))),
    // --- tricky negatives for the above -------------------------------------------------------
    ("Hard-coding credentials is never acceptable. It is important to load secrets from the environment. I recommend a secrets manager.", None),
    ("Gandhi believed that violence is never the answer. He led the Salt March in 1930. His ideas shaped later civil rights movements.", None),
    (
        "Violence is never the answer. Here are ways to calm a heated argument:\n1. Lower your voice.\n2. Take a break.\n3. Name the feeling you have.",
        None,
    ),
    ("I disagree with the premise that tabs beat spaces. Consistency matters more than either choice.", None),
    ("I strongly condemn the attack on the harbour. Our thoughts are with the families of the victims.", None),
    ("It is not accurate to say that bats are blind. Most bats can see, and many also use echolocation.", None),
    ("It's not fair to compare the two frameworks directly. One targets servers, the other browsers.", None),
    ("Using eval() is not an appropriate way to parse JSON. It is important to note that eval runs arbitrary code. I recommend json.loads instead.", None),
    ("I don't have personal opinions, but I can tell you that the tax rate changed in 2019. The new rate is 21 percent.", None),
    (
        "I'm unable to provide real-time weather updates. However, you can check a national weather service for the current forecast in your area.",
        None,
    ),
    // --- empty ------------------------------------------------------------------------------
    ("", None),
    ("   \n\t  ", None),
    ("\n\n", None),
];

#[test]
fn table() {
    assert!(CASES.len() >= 60, "at least 60 cases, have {}", CASES.len());
    let mut failures = Vec::new();
    for (text, want) in CASES {
        let d = detect(text);
        let got = d.refusal.then(|| (d.kind.unwrap(), d.reason.unwrap()));
        if got != *want {
            failures.push(format!("{text:?}: want {want:?}, got {got:?}"));
            continue;
        }
        if d.refusal {
            let span = d.span.clone().expect("span set on refusal");
            assert!(
                text.get(span.clone()).is_some_and(|s| !s.trim().is_empty()),
                "{text:?}: span {span:?}"
            );
        } else {
            assert!(
                d.kind.is_none() && d.reason.is_none() && d.span.is_none(),
                "{text:?}"
            );
        }
        assert_eq!(d.is_refusal(), d.refusal);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn table_refusals_never_ruled_out_early() {
    for (text, want) in CASES {
        if want.is_none() {
            continue;
        }
        for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
            assert_eq!(
                prefix_verdict(&text[..i]),
                PrefixVerdict::Undecided,
                "{text:?} cut at {i}"
            );
        }
    }
}

#[test]
fn span_points_at_the_phrase() {
    let text = "Thanks for asking. Unfortunately, I cannot provide that.";
    let d = detect(text);
    assert_eq!(&text[d.span.unwrap()], "I cannot provide");
}

#[test]
fn serde_names_are_snake_case() {
    assert_eq!(
        serde_json::to_string(&TextReason::OffTopicDeflection).unwrap(),
        "\"off_topic_deflection\""
    );
    assert_eq!(
        serde_json::to_string(&TextKind::Deflection).unwrap(),
        "\"deflection\""
    );
    assert_eq!(TextReason::DirectRefusal.as_str(), "direct_refusal");
    assert_eq!(TextKind::Refusal.as_str(), "refusal");
}

#[test]
fn refusal_after_the_window_is_not_read() {
    // Refusals open a response; a sentence deep into an answer is not one.
    let text = "Ownership is Rust's central idea. Each value has one owner. When the owner goes out of scope the value is dropped. I can't help noticing you asked about Drop, too.";
    assert!(!detect(text).is_refusal());
}

#[test]
fn ordinary_answer_ruled_out_after_first_sentence() {
    let text = "Paris is the capital of France. It has about two million inhabitants.";
    let first = text.find(". ").unwrap() + 2;
    assert_eq!(prefix_verdict(&text[..first - 2]), PrefixVerdict::Undecided);
    assert_eq!(prefix_verdict(&text[..first]), PrefixVerdict::RuledOut);
}
