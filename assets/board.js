// The board's page behaviours (js_on_load of the cards' gr.HTML: `element` is the component,
// mounted once; each new HTML replaces what is inside it).
// 1. A card has a fixed height and its text scrolls inside: every update shows the live end
//    of each answer, but not the card under the pointer (someone is reading it).
// 2. On a narrow screen the lesson sits below the controls: a preset tap brings its question
//    into view as soon as the question arrives.
const toEnd = () => {
  for (const text of element.querySelectorAll(".pg-text")) {
    if (!text.closest(".pg-card:hover")) text.scrollTop = text.scrollHeight;
  }
};
new MutationObserver(toEnd).observe(element, { childList: true, subtree: true });
toEnd();
let asked = false;
let watching = false;
const showQuestion = () => {
  const lesson = document.querySelector("#pg-lesson");
  if (!asked || !lesson) return;
  asked = false;
  lesson.scrollIntoView({ block: "start", behavior: "instant" });
};
document.addEventListener("click", (event) => {
  if (!event.target.closest(".pg-preset") || window.innerWidth > 760) return;
  asked = true;
  const lesson = document.querySelector("#pg-lesson");
  if (lesson && !watching) {
    watching = true;
    new MutationObserver(showQuestion).observe(lesson, { childList: true, subtree: true,
                                                        characterData: true });
  }
  setTimeout(showQuestion, 1500);  // in case the question came before the observer looked
});
